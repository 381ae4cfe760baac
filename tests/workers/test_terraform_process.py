"""The command runner's cancel path with processes that ignore the interrupt (Terraform itself never does)."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from workers.terraform.process import CommandCanceledError, CommandRunner


def gone_within(token: str, seconds: float = 5.0) -> bool:
    """Whether every process whose command line contains `token` has died within `seconds` (a SIGKILL is
    delivered asynchronously: right after killpg() returns the target may still be listed for a moment)."""
    deadline = time.monotonic() + seconds
    while running_with(token):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def running_with(token: str) -> bool:
    """Whether a process whose command line contains `token` is alive (zombies excepted)."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            status = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if token.encode() in cmdline and status != "Z":
            return True
    return False


def test_a_command_that_ignores_the_interrupt_is_killed_after_the_grace_interval(tmp_path: Path) -> None:
    runner = CommandRunner(grace=1.0)
    lines: list[str] = []
    notices: list[str] = []
    # The child sleep outlives a kill of the shell alone: only a kill of the whole process group stops it.
    script = "trap '' INT; echo ready; sleep 30.4242; echo not-reached"
    started = time.monotonic()

    def cancel_when_ready(stream: str, line: str) -> None:
        lines.append(line)
        if line == "ready":
            threading.Timer(0.2, runner.cancel).start()

    exit_code = runner.run(
        ["/bin/sh", "-c", script],
        cwd=tmp_path,
        env=dict(os.environ),
        on_line=cancel_when_ready,
        on_notice=notices.append,
    )

    assert exit_code == -9
    assert 1.0 < time.monotonic() - started < 8
    assert lines == ["ready"]
    assert notices == [
        "Job canceled: interrupting terraform",
        "Terraform did not stop within 1s of the interrupt: killing it",
    ]
    assert gone_within("30.4242")


def test_a_forced_stop_kills_at_once_whatever_the_grace(tmp_path: Path) -> None:
    """The daemon's second Ctrl-C: an interrupt is under way with a long grace; force kills now."""
    runner = CommandRunner(grace=600.0)
    notices: list[str] = []
    script = "trap '' INT; echo ready; sleep 30.4343; echo not-reached"
    started = time.monotonic()

    def interrupt_then_force(stream: str, line: str) -> None:
        if line == "ready":
            threading.Timer(0.2, runner.cancel).start()
            threading.Timer(0.6, runner.kill).start()

    exit_code = runner.run(
        ["/bin/sh", "-c", script], cwd=tmp_path, env=dict(os.environ), on_line=interrupt_then_force,
        on_notice=notices.append,
    )  # fmt: skip

    assert exit_code == -9 and time.monotonic() - started < 8
    assert notices == ["Job canceled: interrupting terraform", "Forced stop: killing terraform"]
    assert gone_within("30.4343")


def test_an_interrupted_command_leaves_no_children_behind(tmp_path: Path) -> None:
    runner = CommandRunner(grace=30.0)
    script = "sleep 30.4343 & echo ready; wait"

    def cancel_when_ready(stream: str, line: str) -> None:
        if line == "ready":
            threading.Thread(target=runner.cancel).start()

    started = time.monotonic()
    runner.run(
        ["/bin/sh", "-c", script],
        cwd=tmp_path,
        env=dict(os.environ),
        on_line=cancel_when_ready,
        on_notice=lambda text: None,
    )

    assert time.monotonic() - started < 5
    assert gone_within("30.4343")
    with pytest.raises(CommandCanceledError):
        runner.run(["/bin/true"], cwd=tmp_path, env={}, on_line=lambda stream, line: None, on_notice=lambda t: None)
