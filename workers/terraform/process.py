"""Running one Terraform command at a time, streaming its output, and cancelling it from any thread."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Literal

Stream = Literal["stdout", "stderr"]
LineHandler = Callable[[Stream, str], None]

# After Terraform exits, how long its output pipes may stay open (held by a stray grandchild) before we stop
# reading them: the exit code is what matters then.
_DRAIN_AFTER_EXIT = 5.0
# Terraform and what it starts run at this nice level (children inherit it).
BUILD_NICENESS = 10


class CommandCanceledError(Exception):
    """The command was not started because the job had been canceled."""


class CommandRunner:
    """Runs commands one after another; `cancel()` may be called from any thread, at any time.

    Output lines and notices (e.g. "killing terraform") are delivered on the thread that called `run`, so the
    log callback never needs a lock.
    """

    def __init__(self, *, grace: float) -> None:
        self.grace = grace
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._canceled = threading.Event()
        self._notices: queue.SimpleQueue[str] = queue.SimpleQueue()

    @property
    def canceled(self) -> bool:
        return self._canceled.is_set()

    def cancel(self) -> None:
        """Interrupt the running command (SIGINT), kill it after `grace` seconds; later commands do not start."""
        with self._lock:
            if self._canceled.is_set():
                return
            self._canceled.set()
            process = self._process
            if process is None or process.poll() is not None:
                self._notices.put("Job canceled")
                return
            self._notices.put("Job canceled: interrupting terraform")
            # SIGINT to terraform alone, as Ctrl-C would: it stops provisioners and plugins itself and saves state.
            os.kill(process.pid, signal.SIGINT)
        timer = threading.Timer(self.grace, self._kill, args=(process,))
        timer.daemon = True
        timer.start()

    def kill(self) -> None:
        """Cancel without grace: kill the running command now (a daemon forced to stop)."""
        with self._lock:
            self._canceled.set()
            process = self._process
        if process is not None:
            self._kill(process, "Forced stop: killing terraform")

    def _kill(self, process: subprocess.Popen[bytes], notice: str = "") -> None:
        with self._lock:
            # Only while it is still ours and running: after wait() the pid may belong to someone else.
            if self._process is not process or process.poll() is not None:
                return
            self._notices.put(notice or f"Terraform did not stop within {self.grace:g}s of the interrupt: killing it")
            # The whole process group: plugins and local-exec children must not outlive a killed terraform.
            os.killpg(process.pid, signal.SIGKILL)

    def drain_notices(self) -> list[str]:
        notices: list[str] = []
        while True:
            try:
                notices.append(self._notices.get_nowait())
            except queue.Empty:
                return notices

    def run(
        self,
        argv: Sequence[str],
        *,
        cwd: Path,
        env: Mapping[str, str],
        on_line: LineHandler,
        on_notice: Callable[[str], None],
    ) -> int:
        """Run to completion, calling `on_line` for each output line as it is produced; return the exit code."""
        lines: queue.SimpleQueue[tuple[Stream, str | None]] = queue.SimpleQueue()
        with self._lock:
            if self._canceled.is_set():
                raise CommandCanceledError
            process = subprocess.Popen(  # noqa: S603 - argv is built by us, never by a shell
                list(argv),
                cwd=cwd,
                env=dict(env),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                # Its own process group, so a hard kill reaches terraform's children too.
                start_new_session=True,
            )
            self._process = process
            try:
                # Below the control plane: a host full of builds must still answer the API and stream logs.
                os.setpriority(os.PRIO_PROCESS, process.pid, BUILD_NICENESS)
            except OSError:
                pass  # it already exited, or the platform does not allow it: priority is a nicety
        readers = [
            threading.Thread(target=_read_lines, args=(pipe, name, lines), daemon=True)
            for pipe, name in ((process.stdout, "stdout"), (process.stderr, "stderr"))
        ]
        for reader in readers:
            reader.start()
        try:
            self._pump(process, lines, on_line, on_notice)
            return process.wait()
        finally:
            with self._lock:
                self._process = None
                if process.poll() is None:
                    # Only when the log callback raised: never leave terraform running unattended.
                    _kill_leftovers(process)
                    process.wait()
                elif self._canceled.is_set():
                    _kill_leftovers(process)
            for notice in self.drain_notices():
                on_notice(notice)

    def _pump(
        self,
        process: subprocess.Popen[bytes],
        lines: queue.SimpleQueue[tuple[Stream, str | None]],
        on_line: LineHandler,
        on_notice: Callable[[str], None],
    ) -> None:
        open_streams = 2
        exited_at: float | None = None
        while open_streams:
            for notice in self.drain_notices():
                on_notice(notice)
            try:
                stream, line = lines.get(timeout=0.1)
            except queue.Empty:
                if exited_at is None and process.poll() is not None:
                    exited_at = time.monotonic()
                    if self._canceled.is_set():
                        _kill_leftovers(process)  # they may hold our pipes open
                if exited_at is not None and time.monotonic() - exited_at > _DRAIN_AFTER_EXIT:
                    return
                continue
            if line is None:
                open_streams -= 1
            else:
                on_line(stream, line)


def _kill_leftovers(process: subprocess.Popen[bytes]) -> None:
    """After a canceled command: kill what it left in its process group (a local-exec's `sleep`, for one).

    Terraform kills the shell of an interrupted local-exec, not that shell's children. Only for canceled jobs:
    a successful local-exec may well start a long-lived process on purpose.
    """
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass  # nothing left


def _read_lines(pipe: IO[bytes] | None, stream: Stream, lines: queue.SimpleQueue[tuple[Stream, str | None]]) -> None:
    if pipe is None:  # only when Popen was not given PIPE, which it always is here
        lines.put((stream, None))
        return
    with pipe:
        for raw in pipe:
            lines.put((stream, raw.decode("utf-8", errors="replace").rstrip("\r\n")))
    lines.put((stream, None))
