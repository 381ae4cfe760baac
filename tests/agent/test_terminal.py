"""Processes on a new pseudo-terminal: size, controlling terminal, input, resize, exit status and hang-up."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

from agent.processes import stop_passing_on_ignored_signals
from agent.terminal import PtyProcess
from tests.agent.support import pid_alive, run
from tests.support.waiting import wait_until


async def read_all(pty: PtyProcess) -> str:
    output = b""
    while chunk := await pty.read():
        output += chunk
    return output.decode()


async def read_until(pty: PtyProcess, marker: str) -> str:
    output = ""
    while marker not in output:
        chunk = await pty.read()
        assert chunk, f"the output ended before {marker!r}: {output!r}"
        output += chunk.decode()
    return output


def test_process_gets_a_controlling_terminal_of_the_given_size(tmp_path: Path) -> None:
    async def scenario() -> tuple[str, int]:
        pty = await PtyProcess.spawn(
            ["/bin/sh", "-c", "stty size; tty; pwd; echo TERM=$TERM; exit 5"],
            cwd=tmp_path,
            env={**os.environ, "TERM": "xterm-256color"},
            rows=30,
            cols=100,
        )
        try:
            return await read_all(pty), await pty.wait()
        finally:
            await pty.hang_up()

    output, status = run(scenario())
    assert status == 5
    assert "30 100" in output
    assert "/dev/pts/" in output
    assert str(tmp_path) in output
    assert "TERM=xterm-256color" in output


def test_input_and_resize_reach_the_process(tmp_path: Path) -> None:
    async def scenario() -> str:
        pty = await PtyProcess.spawn(
            ["/bin/sh", "-c", "echo ready; read answer; echo got=$answer; stty size"],
            cwd=tmp_path,
            env=dict(os.environ),
            rows=24,
            cols=80,
        )
        try:
            await read_until(pty, "ready")
            pty.resize(50, 132)
            await pty.write(b"yes\n")
            return await read_all(pty)
        finally:
            await pty.hang_up()

    output = run(scenario())
    assert "got=yes" in output
    assert "50 132" in output


def test_output_ends_although_a_background_job_holds_the_terminal(tmp_path: Path) -> None:
    # As the agent runs terminals: a test run started under nohup would pass its ignored SIGHUP on to the job,
    # which would then rightly outlive the terminal (what nohup is for).
    stop_passing_on_ignored_signals()
    pid_file = tmp_path / "pid"

    async def scenario() -> str:
        pty = await PtyProcess.spawn(
            ["/bin/sh", "-c", f"sleep 300 & echo $! > {pid_file}; echo started"],
            cwd=tmp_path,
            env=dict(os.environ),
            rows=24,
            cols=80,
        )
        try:
            return await asyncio.wait_for(read_all(pty), 60)
        finally:
            await pty.hang_up()

    assert "started" in run(scenario())
    background = int(pid_file.read_text())
    try:  # the terminal's hang-up reaches the job the shell left behind
        wait_until(lambda: not pid_alive(background), what="the background job to end with its terminal")
    except AssertionError:
        os.kill(background, signal.SIGKILL)
        raise


def test_hang_up_ends_a_running_shell(tmp_path: Path) -> None:
    async def scenario() -> tuple[int, int | None]:
        pty = await PtyProcess.spawn(["/bin/sh"], cwd=tmp_path, env=dict(os.environ), rows=24, cols=80)
        await pty.write(b"echo interactive\n")
        await read_until(pty, "interactive")
        await pty.hang_up(grace=2)
        return pty.pid, pty.returncode

    pid, returncode = run(scenario())
    assert returncode is not None
    assert not pid_alive(pid)
