"""A process on a new pseudo-terminal, for SSH sessions that ask for one and for the web terminal.

The child leads a new session with the PTY as its controlling terminal, so job control, Ctrl-C and SIGWINCH work
as in any terminal. The parent reads the master side without blocking; the output ends when every holder of the
terminal is gone (EIO) or, once the process has exited, when the terminal has been quiet for a moment: a
background job still holding it must not keep the session open.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import signal
import struct
import sys
import time
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

from agent.processes import exit_code, signal_group, wait_group_gone

if sys.platform != "win32":
    import fcntl
    import termios

READ_CHUNK = 64 * 1024
# Stop reading the master while this many chunks wait for the consumer (a slow network).
MAX_BUFFERED_CHUNKS = 64
WRITE_HIGH_WATER = 256 * 1024
DRAIN_QUIET = 0.2  # after the exit, output has ended once nothing came for this long...
DRAIN_LIMIT = 2.0  # ...or after this long reading a background job that keeps writing
HANGUP_GRACE = 5.0


def set_window_size(fd: int, rows: int, cols: int) -> None:
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", max(rows, 1), max(cols, 1), 0, 0))


def _take_controlling_terminal() -> None:
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


class PtyProcess:
    def __init__(self, process: asyncio.subprocess.Process, master: int) -> None:
        self.process = process
        self._master = master
        self._loop = asyncio.get_running_loop()
        self._chunks: deque[bytes] = deque()
        self._readable = asyncio.Event()
        self._eof = False
        self._reading = False
        self._last_output = time.monotonic()
        self._write_buffer = bytearray()
        self._writable = asyncio.Event()
        self._writable.set()
        self._start_reading()
        self._exit_watch = asyncio.create_task(self._end_output_after_exit())

    @classmethod
    async def spawn(
        cls,
        argv: Sequence[str],
        *,
        cwd: str | os.PathLike[str] | None,
        env: Mapping[str, str],
        rows: int,
        cols: int,
        executable: str | None = None,
        tty_variable: str | None = None,
    ) -> PtyProcess:
        """Start ``argv`` on a new terminal; ``tty_variable`` names a variable to set to its device (SSH_TTY)."""
        master, slave = os.openpty()
        try:
            if tty_variable:
                env = {**env, tty_variable: os.ttyname(slave)}
            set_window_size(master, rows, cols)
            extra: dict[str, Any] = {"executable": executable} if executable else {}
            process = await asyncio.create_subprocess_exec(
                *argv,
                stdin=slave,
                stdout=slave,
                stderr=slave,
                cwd=cwd,
                env=dict(env),
                start_new_session=True,
                # subprocess has no option for TIOCSCTTY; this runs after setsid, with fd 0 on the PTY.
                preexec_fn=_take_controlling_terminal,
                **extra,
            )
        except BaseException:
            os.close(master)
            raise
        finally:
            os.close(slave)  # the child has its copies; ours would keep EIO from ever coming
        os.set_blocking(master, False)
        return cls(process, master)

    @property
    def pid(self) -> int:
        return self.process.pid

    # Output ------------------------------------------------------------------------------------------------

    def _start_reading(self) -> None:
        if not self._reading and not self._eof:
            self._loop.add_reader(self._master, self._on_readable)
            self._reading = True

    def _stop_reading(self) -> None:
        if self._reading:
            self._loop.remove_reader(self._master)
            self._reading = False

    def _end_output(self) -> None:
        self._stop_reading()
        self._eof = True
        self._readable.set()

    def _on_readable(self) -> None:
        try:
            data = os.read(self._master, READ_CHUNK)
        except BlockingIOError:
            return
        except OSError as exc:  # EIO: no process holds the terminal any more
            if exc.errno != errno.EIO:
                raise
            data = b""
        if not data:
            self._end_output()
            return
        self._last_output = time.monotonic()
        self._chunks.append(data)
        self._readable.set()
        if len(self._chunks) >= MAX_BUFFERED_CHUNKS:
            self._stop_reading()

    async def read(self) -> bytes:
        """The next output; b"" once the output has ended."""
        while not self._chunks:
            if self._eof:
                return b""
            self._readable.clear()
            await self._readable.wait()
        chunk = self._chunks.popleft()
        if not self._chunks:
            self._start_reading()
        return chunk

    async def _end_output_after_exit(self) -> None:
        await self.process.wait()
        step = DRAIN_QUIET / 4
        reading_since_exit = 0.0
        while not self._eof:
            # Only time spent reading counts: a slow consumer holding chunks must not lose the last output.
            if self._reading:
                quiet = time.monotonic() - self._last_output >= DRAIN_QUIET
                if (quiet and not self._chunks) or reading_since_exit >= DRAIN_LIMIT:
                    self._end_output()
                    break
                reading_since_exit += step
            await asyncio.sleep(step)

    # Input ---------------------------------------------------------------------------------------------------

    def _flush_writes(self) -> None:
        try:
            while self._write_buffer:
                written = os.write(self._master, self._write_buffer)
                del self._write_buffer[:written]
        except BlockingIOError:
            pass
        except OSError:  # the terminal is gone: input has nowhere to go
            self._write_buffer.clear()
        if self._write_buffer:
            self._loop.add_writer(self._master, self._flush_writes)
        else:
            self._loop.remove_writer(self._master)
        if len(self._write_buffer) < WRITE_HIGH_WATER:
            self._writable.set()
        else:
            self._writable.clear()

    async def write(self, data: bytes) -> None:
        if self._master < 0 or not data:
            return
        self._write_buffer += data
        self._flush_writes()
        await self._writable.wait()

    def resize(self, rows: int, cols: int) -> None:
        if self._master >= 0:
            with contextlib.suppress(OSError):
                set_window_size(self._master, rows, cols)

    def signal(self, signum: int) -> None:
        signal_group(self.pid, signum)

    # End ---------------------------------------------------------------------------------------------------

    async def wait(self) -> int:
        """The exit status as a shell reports it (128 + N for signal N)."""
        return exit_code(await self.process.wait())

    @property
    def returncode(self) -> int | None:
        return self.process.returncode

    async def hang_up(self, grace: float = HANGUP_GRACE) -> None:
        """The user went away: SIGHUP the terminal's process group as a closing terminal would, then SIGKILL
        the group if it is still there after ``grace`` seconds."""
        if self.process.returncode is None:
            self.signal(signal.SIGHUP)
            self.signal(signal.SIGCONT)  # a stopped job would not see the SIGHUP
            try:
                await asyncio.wait_for(asyncio.shield(self.process.wait()), grace)
            except TimeoutError:
                self.signal(signal.SIGKILL)
                await self.process.wait()
        self.close()
        await wait_group_gone(self.pid, 0.5)

    def close(self) -> None:
        if self._master < 0:
            return
        self._end_output()
        self._loop.remove_writer(self._master)
        os.close(self._master)
        self._master = -1
        self._writable.set()
        self._exit_watch.cancel()
