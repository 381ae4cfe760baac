"""Web terminals that survive a closed tab, like Coder's reconnecting PTY.

A dial with a ``reconnect`` id attaches to the terminal session of that id, started on first use. The session
keeps its process and the last :data:`SCROLLBACK_BYTES` of output; an attachment first gets that scrollback, then
the live output. Several attachments share one terminal (any of them types and resizes). When the last one
detaches, the session waits :data:`DETACHED_TIMEOUT` seconds for another before it hangs up; it ends at once when
its process exits. The id comes from the server, which derives it from the signed-in user, the agent and the
browser's own id (a uuid4), so it cannot be guessed nor used by another user.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed

from agent.terminal import PtyProcess
from protocol.agentapi import TunnelControl
from protocol.codec import ProtocolError

log = logging.getLogger(__name__)

SCROLLBACK_BYTES = 64 * 1024  # as Coder's reconnecting PTY
DETACHED_TIMEOUT = 5 * 60.0
MAX_SESSIONS = 32  # per agent; a dial beyond it is refused rather than growing without bound
# An attachment this far behind stops the terminal's output for everyone until it catches up (or is gone).
ATTACHMENT_HIGH_WATER = 256 * 1024


class TooManySessions(Exception):
    pass


class ScrollbackBuffer:
    """The last ``capacity`` bytes written: bounded memory whatever the terminal prints."""

    def __init__(self, capacity: int = SCROLLBACK_BYTES) -> None:
        self.capacity = capacity
        self._data = bytearray()

    def write(self, chunk: bytes) -> None:
        self._data += chunk[-self.capacity :]
        excess = len(self._data) - self.capacity
        if excess > 0:
            del self._data[:excess]

    def snapshot(self) -> bytes:
        return bytes(self._data)


class Attachment:
    """One WebSocket on a session: what it still has to be sent, sent in order by its own task."""

    def __init__(self, websocket: ClientConnection) -> None:
        self.websocket = websocket
        self._queue: asyncio.Queue[bytes | str] = asyncio.Queue()
        self.pending = 0
        self.caught_up = asyncio.Event()
        self.caught_up.set()
        self.sent_all = asyncio.Event()
        self.sent_all.set()

    def send(self, message: bytes | str) -> None:
        if not message:
            return
        self._queue.put_nowait(message)
        self.pending += len(message)
        self.sent_all.clear()
        if self.pending > ATTACHMENT_HIGH_WATER:
            self.caught_up.clear()

    async def deliver(self) -> None:
        """Send what is queued until the WebSocket closes."""
        while True:
            message = await self._queue.get()
            await self.websocket.send(message)
            self.pending -= len(message)
            if self.pending <= ATTACHMENT_HIGH_WATER:
                self.caught_up.set()
            if self._queue.empty():
                self.sent_all.set()


class TerminalSession:
    def __init__(
        self, key: str, pty: PtyProcess, on_end: Callable[[TerminalSession], None], timeout: float = DETACHED_TIMEOUT
    ) -> None:
        self.key = key
        self.pty = pty
        self.scrollback = ScrollbackBuffer()
        self._attachments: set[Attachment] = set()
        self._on_end = on_end
        self._timeout = timeout
        self._expiry: asyncio.TimerHandle | None = None
        self._ended = asyncio.Event()
        self._exit_message: str | None = None
        self._pump = asyncio.create_task(self._read_output())
        self._closing: asyncio.Task[None] | None = None
        self._start_expiry()  # a session nobody attaches to (the tunnel failed) must not stay

    @property
    def attached(self) -> int:
        return len(self._attachments)

    @property
    def ended(self) -> bool:
        return self._ended.is_set()

    async def attach(self, websocket: ClientConnection, rows: int, cols: int) -> None:
        """Serve ``websocket`` until it closes or the process ends: the scrollback, then the live output; its
        input and resizes go to the terminal."""
        attachment = Attachment(websocket)
        # No await between the snapshot and joining: every byte is sent exactly once, in order.
        attachment.send(self.scrollback.snapshot())
        self._attachments.add(attachment)
        self._cancel_expiry()
        self.pty.resize(rows, cols)
        delivering = asyncio.create_task(attachment.deliver())
        reading = asyncio.create_task(self._read_input(websocket))
        ended = asyncio.create_task(self._ended.wait())
        try:
            await asyncio.wait({delivering, reading, ended}, return_when=asyncio.FIRST_COMPLETED)
            if ended.done() and self._exit_message is not None:
                # The process exited: what it printed last, then how it ended, before the tunnel closes.
                attachment.send(self._exit_message)
                sent = asyncio.create_task(attachment.sent_all.wait())
                await asyncio.wait({delivering, sent}, timeout=5.0, return_when=asyncio.FIRST_COMPLETED)
                sent.cancel()
        finally:
            self._attachments.discard(attachment)
            attachment.caught_up.set()  # the pump must not wait for a WebSocket that is gone
            for task in (delivering, reading, ended):
                task.cancel()
            await asyncio.gather(delivering, reading, ended, return_exceptions=True)
            if not self._attachments and not self.ended:
                self._start_expiry()

    async def _read_input(self, websocket: ClientConnection) -> None:
        with contextlib.suppress(ConnectionClosed):
            async for message in websocket:
                if isinstance(message, bytes):
                    await self.pty.write(message)
                    continue
                with contextlib.suppress(ProtocolError):  # anything else is ignored, as on a plain terminal tunnel
                    control = TunnelControl.loads(message)
                    if control.type == "resize":
                        self.pty.resize(control.rows or 24, control.cols or 80)

    async def _read_output(self) -> None:
        try:
            while chunk := await self.pty.read():
                self.scrollback.write(chunk)
                for attachment in list(self._attachments):
                    attachment.send(chunk)
                # Back-pressure, as a single terminal has: a slow viewer slows the process's output.
                for attachment in list(self._attachments):
                    await attachment.caught_up.wait()
            code = await self.pty.wait()
            self._exit_message = TunnelControl(type="exit", code=code).dumps()
        finally:
            self._end()
        await self.pty.hang_up()  # what the shell left in the background goes with it, as on a closed terminal

    def _end(self) -> None:
        if not self._ended.is_set():
            self._ended.set()
            self._cancel_expiry()
            self._on_end(self)

    def _start_expiry(self) -> None:
        self._cancel_expiry()
        self._expiry = asyncio.get_running_loop().call_later(self._timeout, self._expire)

    def _cancel_expiry(self) -> None:
        if self._expiry is not None:
            self._expiry.cancel()
            self._expiry = None

    def _expire(self) -> None:
        self._expiry = None
        if not self._attachments:
            log.info("terminal session %s… detached for %.0f s: hanging up", self.key[:8], self._timeout)
            self._closing = asyncio.create_task(self.close())

    async def close(self) -> None:
        """Hang the terminal up (SIGHUP, then SIGKILL after a grace) and forget the session."""
        self._end()
        self._pump.cancel()
        await asyncio.gather(self._pump, return_exceptions=True)
        await self.pty.hang_up()


class TerminalSessions:
    """The agent's reconnectable terminals, by key."""

    def __init__(self, timeout: float = DETACHED_TIMEOUT, limit: int = MAX_SESSIONS) -> None:
        self._sessions: dict[str, TerminalSession] = {}
        self._timeout = timeout
        self._limit = limit
        self._opening = asyncio.Lock()  # two dials with one new key (two tabs at once) must start one shell

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, key: str) -> TerminalSession | None:
        return self._sessions.get(key)

    async def open(self, key: str, spawn: Callable[[], Awaitable[PtyProcess]]) -> tuple[TerminalSession, bool]:
        """The live session ``key`` (reattached), or a new one started with ``spawn``; True when it is new."""
        async with self._opening:
            existing = self._sessions.get(key)
            if existing is not None and not existing.ended:
                return existing, False
            if len(self._sessions) >= self._limit:
                raise TooManySessions(f"this agent already keeps {self._limit} terminal sessions; close some first")
            pty = await spawn()
            session = TerminalSession(key, pty, self._forget, self._timeout)
            self._sessions[key] = session
            return session, True

    def _forget(self, session: TerminalSession) -> None:
        if self._sessions.get(session.key) is session:
            del self._sessions[session.key]

    async def close_all(self) -> None:
        """The agent is stopping: hang every terminal up."""
        sessions = list(self._sessions.values())
        await asyncio.gather(*(session.close() for session in sessions), return_exceptions=True)
