"""A real wheelhouse for this machine's platform (fetched from PyPI once per test run), and workspace processes."""

from __future__ import annotations

import contextlib
import fcntl
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from cli.wheelhouse import build_wheelhouse


def native_platform() -> str:
    arch = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}[platform.machine().lower()]
    return f"{'darwin' if sys.platform == 'darwin' else 'linux'}-{arch}"


def native_wheelhouse(factory: pytest.TempPathFactory) -> Path:
    """Built once per test run, shared by every test module and every parallel worker that asks: the first to
    come builds it under a lock in the run's shared temp dir, the others wait for it and reuse it."""
    root = factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # pytest-of-<user>/pytest-N, above each worker's popen-gwN
    directory, built = root / "agent-wheels-native", root / "agent-wheels-native.built"
    with (root / "agent-wheels-native.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not built.exists():
            shutil.rmtree(directory, ignore_errors=True)
            directory.mkdir()
            report = build_wheelhouse(directory, [native_platform()])
            assert report.built, f"the wheelhouse could not be built (is PyPI reachable?): {report.platforms[0].errors}"
            built.touch()
    return directory


def base_python() -> Path:
    """The interpreter this venv was made from: a workspace's python3, which has no Slipway installed."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for directory in (Path(sys.base_prefix) / "bin", Path("/usr/bin"), Path("/usr/local/bin")):
        if (directory / version).exists():
            return directory / version
    raise AssertionError(f"no {version} outside the venv")


def start_script(script: Path, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """Run an init script with `sh` in a session of its own, as a workspace's entrypoint would."""
    with log.open("ab") as output:
        return subprocess.Popen(
            ["sh", str(script)],
            cwd=script.parent,
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def wait_for_exec(process: subprocess.Popen[bytes], log: Path, timeout: float = 240) -> list[str]:
    """The command line the script exec'd into once it runs `python ... -m agent` (same pid: exec, not fork)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"the script ended with {process.returncode}:\n{log.read_text()}")
        with contextlib.suppress(psutil.Error):
            cmdline = psutil.Process(process.pid).cmdline()
            if cmdline[-2:] == ["-m", "agent"]:
                return cmdline
        time.sleep(0.1)
    raise AssertionError(f"the agent did not start within {timeout} s:\n{log.read_text()}")


def wait_for_output(log: Path, text: str, *, count: int = 1, timeout: float = 30) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        content = log.read_text()
        if content.count(text) >= count:
            return content
        time.sleep(0.1)
    raise AssertionError(f"{text!r} did not appear {count} time(s) within {timeout} s:\n{log.read_text()}")


def stop_group(process: subprocess.Popen[bytes], timeout: float = 30) -> None:
    """SIGTERM to the script's process group, SIGKILL if it lingers; always reaps the process."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
