"""The agent as a process: graceful exit on SIGTERM, its own log file, and imports without POSIX modules."""

from __future__ import annotations

import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from agent.lifecycle import OFF, READY, SHUTDOWN_ERROR, START_ERROR, START_TIMEOUT
from agent.main import outcome
from agent.runtime_dir import default_runtime_dir
from agent.scripts import ScriptResult
from agent.ssh_service import SSHService
from tests.agent.support import run, session_context, ssh_over_socketpair
from tests.agent.test_config import REPOSITORY


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_lifecycle_outcome_of_scripts() -> None:
    ok, failed, timed_out = ScriptResult(0), ScriptResult(1), ScriptResult(130, timed_out=True)
    assert outcome([], START_TIMEOUT, START_ERROR, READY) == READY
    assert outcome([ok, failed], START_TIMEOUT, START_ERROR, READY) == START_ERROR
    assert outcome([failed, timed_out], START_TIMEOUT, START_ERROR, READY) == START_TIMEOUT
    assert outcome([ok, ScriptResult(None)], "shutdown_timeout", SHUTDOWN_ERROR, OFF) == SHUTDOWN_ERROR


def test_sigterm_while_waiting_for_the_server_exits_0(tmp_path: Path) -> None:
    log_file = tmp_path / "logs" / "slipway-agent.log"
    agent = subprocess.Popen(
        [sys.executable, "-m", "agent"],
        cwd=REPOSITORY,
        env={
            "PATH": "/usr/bin:/bin",
            "HOME": str(tmp_path),
            "SLIPWAY_AGENT_URL": f"http://127.0.0.1:{closed_port()}/",
            "SLIPWAY_AGENT_TOKEN": "token-that-must-not-be-logged",
            "SLIPWAY_AGENT_LOG_DIR": str(tmp_path / "logs"),
        },
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while "waiting for the server" not in (log_file.read_text() if log_file.exists() else ""):
            assert time.monotonic() < deadline, "the agent never said it was waiting"
            time.sleep(0.1)
        time.sleep(1.5)  # several retries, still one line
        agent.send_signal(signal.SIGTERM)
        _, stderr = agent.communicate(timeout=15)
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.communicate()
    assert agent.returncode == 0
    log = log_file.read_text()
    assert log.count("waiting for the server") == 1
    assert "SIGTERM: shutting down" in log
    assert "token-that-must-not-be-logged" not in log + stderr


def test_the_package_imports_without_posix_only_modules() -> None:
    # What a Windows interpreter lacks; the agent must at least import there.
    probe = """
import sys
import asyncio, subprocess, httpx, websockets.asyncio.client, asyncssh  # the libraries handle Windows themselves
class NoPosix:
    def find_spec(self, name, path=None, target=None):
        if name in ("fcntl", "termios", "pwd", "pty", "resource"):
            raise ImportError(name)
sys.meta_path.insert(0, NoPosix())
for name in ("fcntl", "termios", "pwd", "pty", "resource"):
    sys.modules.pop(name, None)
sys.platform = "win32"
import agent.main, agent.terminal, agent.sshd, agent.environment
print("imported")
"""
    result = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPOSITORY, capture_output=True, text=True, timeout=60, check=False
    )
    assert result.stdout.strip() == "imported", result.stderr


def test_the_agent_starts_without_loading_ssh_or_httpxs_command_line_client(tmp_path: Path) -> None:
    """Issue 43: what a new workspace waits for. ``python -m agent`` (here stopped by a missing token, after all its
    start-up imports) loads neither asyncssh nor httpx's command line client (click, rich: installed here, as in a
    daemon's environment); the first SSH session loads asyncssh then (test below)."""
    agent = subprocess.run(
        [sys.executable, "-X", "importtime", "-P", "-m", "agent"],
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "SLIPWAY_AGENT_URL": "http://127.0.0.1:1/"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    imported = {line.rsplit("|", 1)[-1].strip() for line in agent.stderr.splitlines() if line.startswith("import")}
    assert agent.returncode == 2 and "agent.main" in imported and "websockets" in imported, agent.stderr[-2000:]
    assert not {name for name in imported if name.split(".")[0] in ("asyncssh", "cryptography", "rich", "click")}


def test_ssh_is_loaded_by_its_first_session_or_by_the_warm_up_once_ready(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()

    async def scenario() -> tuple[bool, str, bool]:
        service = SSHService(lambda: session_context(tmp_path, home))
        await service.close_all(1.0)  # nothing served yet: nothing to close, nothing loaded
        loaded_before = service._service is not None
        async with ssh_over_socketpair(service) as connection:  # type: ignore[arg-type]
            result = await connection.run("echo hello", check=True)
        warmed = SSHService(lambda: session_context(tmp_path, home))
        await warmed.warm()
        return loaded_before, str(result.stdout), warmed._service is not None

    loaded_before, output, warmed = run(scenario())
    assert not loaded_before and output == "hello\n" and warmed


def _log_says(path: Path, text: str, agent: subprocess.Popen[str], timeout: float = 30) -> str:
    deadline = time.monotonic() + timeout
    while True:
        log = path.read_text() if path.exists() else ""
        if text in log:
            return log
        assert agent.poll() is None, f"the agent exited ({agent.returncode}): {agent.communicate()}"
        assert time.monotonic() < deadline, f"the agent never said {text!r}:\n{log}"
        time.sleep(0.1)


def test_agents_without_a_log_dir_each_get_their_own_and_never_share_a_git_socket(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 34, H0: every workspace a daemon starts has the daemon's TMPDIR; its agents must not meet there."""
    # Short, as a daemon's TMPDIR is: the sockets inside must fit a unix socket path.
    temp_dir = Path(tempfile.mkdtemp(prefix="daemon-tmp-", dir="/tmp"))

    def start(token: str) -> subprocess.Popen[str]:
        environ = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "TMPDIR": str(temp_dir),
                   "SLIPWAY_AGENT_URL": f"http://127.0.0.1:{closed_port()}/", "SLIPWAY_AGENT_TOKEN": token}  # fmt: skip
        return subprocess.Popen(
            [sys.executable, "-m", "agent"], cwd=REPOSITORY, env=environ, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True,
        )  # fmt: skip

    tokens = ["token-of-carols-agent", "token-of-daves-agent"]
    agents = [start(token) for token in tokens]
    monkeypatch.setattr(tempfile, "tempdir", str(temp_dir))  # where each agent's own directory is, by its token
    directories = [default_runtime_dir(token) for token in tokens]
    try:
        logs = [
            _log_says(directory / "slipway-agent.log", "git helper listening on", agent)
            for directory, agent in zip(directories, agents, strict=True)
        ]
        # The shared temp dir holds the two agents' directories and nothing else (no socket of its own).
        assert sorted(temp_dir.iterdir()) == sorted(directories) and directories[0] != directories[1]
        for directory, log in zip(directories, logs, strict=True):
            assert stat.S_IMODE(directory.stat().st_mode) == 0o700
            assert f"git helper listening on {directory / 'git.sock'}" in log
            assert "token-of" not in directory.name
        # A second agent with carol's agent's token (so the same directory) is refused the live socket.
        intruder = start("token-of-carols-agent")
        agents.append(intruder)
        log = _log_says(directories[0] / "slipway-agent.log", "the git helper did not start", intruder)
        assert log.count("git helper listening on") == 1
    finally:
        for agent in agents:
            agent.send_signal(signal.SIGTERM)
        for agent in agents:
            try:
                agent.communicate(timeout=15)
            except subprocess.TimeoutExpired:
                agent.kill()
                agent.communicate()
        shutil.rmtree(temp_dir)
