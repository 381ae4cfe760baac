"""The unix init script for real: a real `slipway server` serves it and the bundle, `sh` runs it in a fresh HOME.

Internet access is cut off with a proxy that goes nowhere (only the server on 127.0.0.1 is reachable), so the
install can only succeed offline, from the bundle.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import time
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path

import httpx
import psutil
import pytest

from tests.conftest import PASSWORD, run_cli
from tests.support.agent_bundle import (
    base_python,
    native_platform,
    native_wheelhouse,
    start_script,
    stop_group,
    wait_for_exec,
    wait_for_output,
)
from tests.support.daemon_user import daemon_writable_dir
from tests.support.server import ServerProcess

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "local"
TOKEN = "5e0b4f5e-6a39-4f4e-9d54-1d8f3c2a7b10"
# The tools the script may use besides a downloader; each run gets a PATH of exactly these.
BASE_TOOLS = ("sh", "mkdir", "chmod", "rm", "cat", "head", "tail", "tr", "sleep", "find", "touch", "grep")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    wheelhouse = native_wheelhouse(tmp_path_factory)
    data = tmp_path_factory.mktemp("bootstrap-server") / "data"
    with ServerProcess(data, "--provisioner-daemons", "0", "--agent-wheelhouse", str(wheelhouse)) as running:
        yield running


def _script(server: ServerProcess, directory: Path, platform: str) -> Path:
    os_name, arch = platform.split("-")
    response = httpx.get(f"{server.url}/api/v2/init-script/{os_name}/{arch}")
    assert response.status_code == 200
    script = directory / f"init-{platform}.sh"
    script.write_text(response.text)
    return script


def _tools(directory: Path, *downloaders: str) -> str:
    """A PATH with python3 (the base interpreter, without Slipway), the basic tools, and only these downloaders."""
    directory.mkdir()
    (directory / "python3").symlink_to(base_python())
    for tool in (*BASE_TOOLS, *downloaders):
        found = shutil.which(tool)
        assert found, f"{tool} is needed for this test"
        (directory / tool).symlink_to(found)
    return str(directory)


def _env(tmp_path: Path, path: str, **extra: str) -> dict[str, str]:
    return {
        "PATH": path,
        "HOME": str(tmp_path / "home"),
        "CODER_AGENT_TOKEN": TOKEN,
        "SLIPWAY_AGENT_LOG_DIR": str(tmp_path),
        "http_proxy": "http://127.0.0.1:9",
        "https_proxy": "http://127.0.0.1:9",
        "no_proxy": "127.0.0.1,localhost",
        **extra,
    }


def _run_until_agent(script: Path, env: dict[str, str], log: Path) -> list[str]:
    process = start_script(script, env, log)
    try:
        cmdline = wait_for_exec(process, log)
        time.sleep(2)
        # Still running: the agent itself started (and is now retrying with its unknown token).
        assert process.poll() is None, log.read_text()
        return cmdline
    finally:
        stop_group(process)


def test_script_downloads_installs_offline_and_starts_the_agent(server: ServerProcess, tmp_path: Path) -> None:
    script = _script(server, tmp_path, native_platform())
    path = _tools(tmp_path / "bin", "curl")
    home = tmp_path / "home" / ".cache" / "slipway-agent"

    first = tmp_path / "first.log"
    cmdline = _run_until_agent(script, _env(tmp_path, path), first)
    [venv] = [entry for entry in home.iterdir() if entry.name.startswith("venv-")]
    assert cmdline == [str(venv / "bin" / "python"), "-I", "-m", "agent"]
    output = first.read_text()
    assert "installing the agent into" in output and "starting the agent" in output
    assert TOKEN not in output
    # The bundle carries the agent's code, not Slipway's metadata: the server's version rides along.
    assert f"slipway agent {version('slipway')} connecting" in (tmp_path / "slipway-agent.log").read_text()
    assert oct(home.stat().st_mode & 0o777) == "0o700"
    # Nothing is left of the download but the venv.
    assert [entry.name for entry in home.iterdir()] == [venv.name]

    # Started again: the same bundle reuses the venv. Here SLIPWAY_AGENT_PYTHON names an interpreter without the
    # agent, and neither curl nor wget exist: Python's urllib downloads. A folder named agent in the working
    # directory fools neither the check of SLIPWAY_AGENT_PYTHON nor the venv's interpreter.
    (tmp_path / "agent").mkdir()
    (tmp_path / "agent" / "__main__.py").write_text("raise SystemExit('not the agent')\n")
    second = tmp_path / "second.log"
    python_only = _tools(tmp_path / "python-only")
    env = _env(tmp_path, python_only, SLIPWAY_AGENT_PYTHON=str(base_python()))
    assert _run_until_agent(script, env, second) == cmdline
    output = second.read_text()
    assert "cannot import the agent; downloading it instead" in output and "installing" not in output

    third = tmp_path / "third.log"
    assert _run_until_agent(script, _env(tmp_path, _tools(tmp_path / "wget-only", "wget")), third) == cmdline
    assert [entry.name for entry in home.iterdir()] == [venv.name]


def test_a_missing_bundle_is_retried_every_5_seconds(server: ServerProcess, tmp_path: Path) -> None:
    # The fixture's wheelhouse has only this machine's platform: arm's bundle is a 404.
    missing = "linux-armv7" if native_platform() != "linux-armv7" else "linux-arm64"
    script = _script(server, tmp_path, missing)
    log = tmp_path / "missing.log"
    process = start_script(script, _env(tmp_path, _tools(tmp_path / "bin", "curl")), log)
    try:
        started = time.monotonic()
        output = wait_for_output(log, "retrying in 5 s", count=2, timeout=20)
        assert time.monotonic() - started >= 4.5
    finally:
        stop_group(process)
    failures = [line for line in output.splitlines() if "could not download" in line]
    assert len(failures) >= 2
    assert "HTTP 404" in failures[0] and f"slipway agent-bundle --platform {missing}" in failures[0]


def test_slipway_agent_python_runs_the_agent_without_downloading(server: ServerProcess, tmp_path: Path) -> None:
    script = _script(server, tmp_path, native_platform())
    log = tmp_path / "direct.log"
    env = _env(tmp_path, os.environ["PATH"], SLIPWAY_AGENT_PYTHON=sys.executable)
    assert _run_until_agent(script, env, log) == [sys.executable, "-P", "-m", "agent"]
    assert not (tmp_path / "home").exists()
    assert "downloading" not in log.read_text()


def _group_members(group: int) -> list[psutil.Process]:
    members = []
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if os.getpgid(process.pid) == group and process.status() != psutil.STATUS_ZOMBIE:
                members.append(process)
    return members


def test_local_example_runs_the_agent_and_stops_it_gracefully(tmp_path: Path) -> None:
    with ServerProcess(tmp_path / "data", "--provisioner-daemons", "1") as server:
        env = {key: value for key, value in os.environ.items() if not key.startswith("SLIPWAY_")}
        env["XDG_CONFIG_HOME"] = str(tmp_path / "config")
        first = {"username": "alice", "email": "alice@example.com", "password": PASSWORD}
        assert httpx.post(f"{server.url}/api/v2/users/first", json=first).status_code == 201
        login = run_cli("login", server.url, "--email", "alice@example.com", env=env, input_text=f"{PASSWORD}\n")
        assert login.returncode == 0, login.stderr
        root = daemon_writable_dir("workspaces")
        pushed = run_cli(
            "templates", "push", "local", "-d", str(EXAMPLE), "--variable", f"workspaces_root={root}", env=env
        )
        assert pushed.returncode == 0, pushed.stdout + pushed.stderr
        created = run_cli("create", "ws1", "-t", "local", env=env)
        assert created.returncode == 0, created.stdout + created.stderr

        directory = root / "alice" / "ws1"
        # The build's script, filled in by the Terraform provider, is the one the server serves.
        served = httpx.get(f"{server.url}/api/v2/init-script/linux/{native_platform().split('-')[1]}").text
        assert (directory / "init.sh").read_text() == served + "\n"
        group = int((directory / "workspace.pid").read_text())
        deadline = time.monotonic() + 30
        agents: list[psutil.Process] = []
        while not agents and time.monotonic() < deadline:
            agents = [p for p in _group_members(group) if p.cmdline()[-3:] == ["-P", "-m", "agent"]]
            time.sleep(0.2)
        assert agents, (directory / "agent.log").read_text()
        # The daemon's own interpreter, handed over in SLIPWAY_AGENT_PYTHON: nothing was downloaded.
        assert server.process is not None
        assert agents[0].cmdline()[0] == psutil.Process(server.process.pid).cmdline()[0]

        started = time.monotonic()
        stopped = run_cli("stop", "ws1", env=env, timeout=120)
        assert stopped.returncode == 0, stopped.stdout + stopped.stderr
        # Well under the 60 s grace: the agent exited on SIGTERM rather than being killed.
        assert time.monotonic() - started < 45
        assert not _group_members(group)
        assert not (directory / "workspace.pid").exists()
