"""Child processes in their own process group, with output on pipes the agent owns.

The agent makes the pipes itself rather than asking asyncio for them: asyncio's ``Process.wait()`` also waits for
the pipes to close, and a background child that inherited them would then hold the script "running" forever.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, Any

READ_CHUNK = 64 * 1024
# SIGKILL takes effect only when the kernel next runs each process (later still in uninterruptible sleep): wait
# this long for it, so that "stopped" means gone, and lifecycle "off" is not reported with processes still there.
KILL_SETTLE = 2.0
_PR_SET_DUMPABLE = 4  # linux/prctl.h


# Signals that a shell leaves ignored in its background jobs (SIGINT, SIGQUIT) and that nohup ignores (SIGHUP).
# exec resets a caught signal to its default but keeps an ignored one ignored. SIGINT needs nothing here, because the
# agent catches it to stop.
PASSED_ON_IF_IGNORED = tuple(getattr(signal, name) for name in ("SIGHUP", "SIGQUIT") if hasattr(signal, name))


def _keep_ignoring(signum: int, frame: object) -> None:
    pass


def stop_passing_on_ignored_signals() -> None:
    """Catch, and go on ignoring, the signals the agent was started with ignored, so that the shells, commands and
    scripts it starts get them at their defaults. Started as a background job (as the local example starts it),
    every session would otherwise ignore Ctrl-\\, and under nohup a shell whose SSH connection dropped would
    ignore the hangup."""
    for signum in PASSED_ON_IF_IGNORED:
        if signal.getsignal(signum) == signal.SIG_IGN:
            signal.signal(signum, _keep_ignoring)


def make_undumpable() -> None:
    """Keep processes of the same OS user (another workspace's, where workspaces share one: examples/local) from
    reading this process's /proc files (its environment held the agent's token at start; its memory holds it
    still) or tracing it; only root can. exec resets it, so the shells and commands the agent starts are ordinary
    processes of their user."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), f"prctl(PR_SET_DUMPABLE): {os.strerror(ctypes.get_errno())}")


def posix_shell_command(script: str) -> list[str]:
    if sys.platform == "win32":
        return [os.environ.get("COMSPEC", "cmd.exe"), "/c", script]
    return ["/bin/sh", "-c", script]


def exit_code(returncode: int) -> int:
    """A shell's view of a status: death by signal N is 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


def signal_group(pgid: int, signum: int) -> bool:
    """Signal a whole process group; False when no process of it is left."""
    try:
        os.killpg(pgid, signum)
    except ProcessLookupError:
        return False
    except PermissionError:  # the group id was reused by someone else's process
        return False
    return True


def _live_members_in_proc(pgid: int) -> bool | None:
    """Whether /proc lists a process of the group that is not a zombie; None where there is no /proc."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        return None
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat:
                fields = stat.read().rpartition(b")")[2].split()
        except OSError:  # gone meanwhile
            continue
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] != b"Z":
            return True
    return False


def group_alive(pgid: int) -> bool:
    """Whether a process of the group still runs. Zombies do not count: when the agent is PID 1 of a container
    nobody reaps the orphans it inherits, and waiting for them would only delay shutdown."""
    if not signal_group(pgid, 0):
        return False
    live = _live_members_in_proc(pgid)
    return True if live is None else live


async def wait_group_gone(pgid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while group_alive(pgid):
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(0.05)
    return True


async def terminate_group(pgid: int, *, first: int = signal.SIGTERM, grace: float = 5.0) -> None:
    """``first`` to the group, then SIGKILL to whatever is left after ``grace`` seconds; returns once the group is
    gone (or has resisted even SIGKILL for KILL_SETTLE seconds)."""
    if not signal_group(pgid, first):
        return
    if not await wait_group_gone(pgid, grace):
        signal_group(pgid, signal.SIGKILL)
        await wait_group_gone(pgid, KILL_SETTLE)


class PipeWriter(asyncio.Protocol):
    """Writes to a child's stdin pipe, with flow control and EOF (closing the pipe)."""

    def __init__(self) -> None:
        self._transport: asyncio.WriteTransport | None = None
        self._can_write = asyncio.Event()
        self._can_write.set()
        self.closed = asyncio.Event()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if isinstance(transport, asyncio.WriteTransport):  # always so for connect_write_pipe
            self._transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        self._can_write.set()
        self.closed.set()

    def pause_writing(self) -> None:
        self._can_write.clear()

    def resume_writing(self) -> None:
        self._can_write.set()

    async def write(self, data: bytes) -> None:
        if self._transport is None or self.closed.is_set():
            return  # the child closed its stdin: what it would not read is dropped, as a pipe would
        self._transport.write(data)
        await self._can_write.wait()

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()


@dataclass
class PipedProcess:
    process: asyncio.subprocess.Process
    stdout: asyncio.StreamReader
    stderr: asyncio.StreamReader
    stdin: PipeWriter | None = None
    _transports: list[asyncio.BaseTransport] = field(default_factory=list)

    @property
    def pgid(self) -> int:
        return self.process.pid  # each child leads its own session, hence its group

    def close_pipes(self) -> None:
        """Stop reading and writing; a background child still writing then gets EPIPE."""
        for transport in self._transports:
            transport.close()


async def _read_pipe(fd: int) -> tuple[asyncio.StreamReader, asyncio.BaseTransport]:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=READ_CHUNK, loop=loop)
    pipe: IO[bytes] = os.fdopen(fd, "rb", buffering=0)
    transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader, loop=loop), pipe)
    return reader, transport


async def spawn_piped(
    argv: Sequence[str],
    *,
    cwd: str | os.PathLike[str] | None,
    env: Mapping[str, str],
    with_stdin: bool = False,
    executable: str | None = None,
) -> PipedProcess:
    """Start ``argv`` in a new session (so a new process group) with stdout and stderr on agent-owned pipes."""
    loop = asyncio.get_running_loop()
    out_read, out_write = os.pipe()
    err_read, err_write = os.pipe()
    in_read, in_write = os.pipe() if with_stdin else (-1, -1)
    child_ends = [out_write, err_write] + ([in_read] if with_stdin else [])
    parent_ends = [out_read, err_read] + ([in_write] if with_stdin else [])
    extra: dict[str, Any] = {"executable": executable} if executable else {}
    try:
        process = await asyncio.create_subprocess_exec(
            *argv,
            stdin=in_read if with_stdin else asyncio.subprocess.DEVNULL,
            stdout=out_write,
            stderr=err_write,
            cwd=cwd,
            env=dict(env),
            start_new_session=True,
            **extra,
        )
    except BaseException:
        for fd in child_ends + parent_ends:
            os.close(fd)
        raise
    for fd in child_ends:
        os.close(fd)
    stdout, out_transport = await _read_pipe(out_read)
    stderr, err_transport = await _read_pipe(err_read)
    piped = PipedProcess(process, stdout, stderr, _transports=[out_transport, err_transport])
    if with_stdin:
        writer = PipeWriter()
        pipe: IO[bytes] = os.fdopen(in_write, "wb", buffering=0)
        in_transport, _ = await loop.connect_write_pipe(lambda: writer, pipe)
        piped.stdin = writer
        piped._transports.append(in_transport)
    return piped


async def kill_and_reap(piped: PipedProcess) -> None:
    """For abandoned children (a cancelled metadata probe): SIGKILL the group, wait for the exit, close pipes."""
    signal_group(piped.pgid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        piped.process.kill()
    await piped.process.wait()
    piped.close_pipes()


class ProcessGroups:
    """Process groups the agent started for scripts and for users (SSH sessions, terminals). At shutdown it stops
    what is left of them: a workspace that is only a process on a shared machine (examples/local) must not leave
    a user's `nohup server &` running after it stopped; in a container they would have gone with it anyway."""

    def __init__(self) -> None:
        self._groups: set[int] = set()

    def add(self, pgid: int) -> None:
        self._groups.add(pgid)

    async def stop(self, grace: float = 5.0) -> None:
        """SIGTERM every remembered group, SIGKILL what is left ``grace`` seconds later."""
        groups, self._groups = list(self._groups), set()
        await asyncio.gather(*(terminate_group(pgid, grace=grace) for pgid in groups))
