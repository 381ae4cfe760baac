"""Reconnecting terminals (agent/terminal_sessions.py) with real shells on real PTYs, a WebSocket peer standing for
the user's side of each tunnel: replay on reattach, shared attachments, the detached timeout, exit, and limits."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed

from agent.terminal import PtyProcess
from agent.terminal_sessions import ScrollbackBuffer, TerminalSession, TerminalSessions, TooManySessions
from tests.agent.support import run


class User:
    """The user's half of one tunnel: what arrived so far, and a way to wait for some text in it."""

    def __init__(self, websocket: ServerConnection) -> None:
        self.websocket = websocket
        self.output = b""
        self.controls: list[dict[str, object]] = []

    async def until(self, text: str) -> None:
        while text.encode() not in self.output:
            frame = await self.websocket.recv()
            if isinstance(frame, bytes):
                self.output += frame
            else:
                self.controls.append(json.loads(frame))

    async def type(self, line: str) -> None:
        await self.websocket.send(f"{line}\n".encode())

    async def until_closed(self) -> None:
        try:
            while True:
                frame = await self.websocket.recv()
                if isinstance(frame, str):
                    self.controls.append(json.loads(frame))
                else:
                    self.output += frame
        except ConnectionClosed:
            return


@asynccontextmanager
async def tunnel(session: TerminalSession) -> AsyncIterator[User]:
    """A tunnel attached to ``session`` while the block runs; leaving the block closes it (the tab closes) and
    waits for the agent's side to detach."""
    users: asyncio.Queue[User] = asyncio.Queue()
    done = asyncio.Event()

    async def user_side(websocket: ServerConnection) -> None:
        await users.put(User(websocket))
        await done.wait()

    async with serve(user_side, "127.0.0.1", 0) as server:
        port = server.sockets[0].getsockname()[1]
        agent_side: ClientConnection = await connect(f"ws://127.0.0.1:{port}", compression=None)

        async def attach_then_close() -> None:  # as the agent's dial does
            try:
                await session.attach(agent_side, 24, 80)
            finally:
                await agent_side.close()

        attached = asyncio.create_task(attach_then_close())
        user = await users.get()
        try:
            yield user
        finally:
            done.set()
            await user.websocket.close()
            await attached


def shell(directory: Path) -> Callable[[], Awaitable[PtyProcess]]:
    async def spawn() -> PtyProcess:
        env = {**os.environ, "PS1": "$ ", "ENV": ""}
        return await PtyProcess.spawn(["/bin/sh", "-i"], cwd=directory, env=env, rows=24, cols=80)

    return spawn


def test_the_scrollback_keeps_the_last_bytes_only() -> None:
    buffer = ScrollbackBuffer(capacity=10)
    for chunk in (b"abc", b"defgh", b"ijklm"):
        buffer.write(chunk)
    assert buffer.snapshot() == b"defghijklm"
    buffer.write(b"0123456789ABCDEF")  # one chunk larger than the whole buffer
    assert buffer.snapshot() == b"6789ABCDEF"
    assert len(ScrollbackBuffer().snapshot()) == 0 and ScrollbackBuffer().capacity == 64 * 1024


def test_a_reattached_tunnel_gets_the_scrollback_and_the_same_shell(tmp_path: Path) -> None:
    async def scenario() -> None:
        sessions = TerminalSessions(timeout=60)
        session, new = await sessions.open("key-1", shell(tmp_path))
        assert new
        async with tunnel(session) as first:
            await first.type("MARK=kept; echo first-$MARK-done")
            await first.until("first-kept-done")
        assert session.attached == 0 and not session.ended and len(sessions) == 1  # kept while detached

        again, new = await sessions.open("key-1", shell(tmp_path))
        assert again is session and not new
        async with tunnel(again) as second:
            await second.until("first-kept-done")  # replayed before anything new
            await second.type("echo again-$MARK")
            await second.until("again-kept")
        assert second.output.startswith(first.output)  # everything the first tab saw, in order
        await sessions.close_all()
        assert session.pty.returncode is not None and len(sessions) == 0

    run(scenario())


def test_attachments_share_one_terminal(tmp_path: Path) -> None:
    async def scenario() -> None:
        sessions = TerminalSessions(timeout=60)
        session, _ = await sessions.open("shared", shell(tmp_path))
        async with tunnel(session) as one, tunnel(session) as two:
            await one.type("echo from-$((40+2))")
            await two.until("from-42")
            await two.type("echo back-$((50+5))")
            await one.until("back-55")
            assert session.attached == 2
        await sessions.close_all()

    run(scenario())


def test_a_detached_session_hangs_up_after_the_timeout(tmp_path: Path) -> None:
    async def scenario() -> None:
        sessions = TerminalSessions(timeout=0.3)
        session, _ = await sessions.open("left", shell(tmp_path))
        async with tunnel(session) as user:
            await user.type("echo up")
            await user.until("up\r\n")
        assert len(sessions) == 1
        await asyncio.wait_for(session.pty.process.wait(), 30)  # hung up by the timeout, nobody else
        assert session.ended and len(sessions) == 0
        fresh, new = await sessions.open("left", shell(tmp_path))
        assert new and fresh is not session
        await sessions.close_all()

    run(scenario())


def test_an_attachment_keeps_a_session_past_its_timeout(tmp_path: Path) -> None:
    async def scenario() -> None:
        sessions = TerminalSessions(timeout=0.2)
        session, _ = await sessions.open("watched", shell(tmp_path))
        async with tunnel(session) as user:
            # Well past the timeout, attached the whole time: still the same shell.
            await user.type("X=still; sleep 1; echo $X-here")
            await user.until("still-here")
            assert not session.ended
        await asyncio.wait_for(session.pty.process.wait(), 30)

    run(scenario())


def test_the_shell_exiting_ends_the_session_and_says_how(tmp_path: Path) -> None:
    async def scenario() -> None:
        sessions = TerminalSessions(timeout=60)
        session, _ = await sessions.open("exits", shell(tmp_path))
        async with tunnel(session) as user:
            await user.type("exit 3")
            await user.until_closed()  # the agent closes the tunnel after the exit message
        assert [(control["type"], control["code"]) for control in user.controls] == [("exit", 3)]
        assert session.ended and len(sessions) == 0
        _, new = await sessions.open("exits", shell(tmp_path))
        assert new  # the same id starts a new shell
        await sessions.close_all()

    run(scenario())


def test_sessions_are_bounded(tmp_path: Path) -> None:
    async def scenario() -> None:
        sessions = TerminalSessions(timeout=60, limit=1)
        await sessions.open("one", shell(tmp_path))
        with pytest.raises(TooManySessions):
            await sessions.open("two", shell(tmp_path))
        await sessions.close_all()

    run(scenario())


def test_two_dials_for_one_new_key_start_one_shell(tmp_path: Path) -> None:
    async def scenario() -> None:
        sessions = TerminalSessions(timeout=60)
        (first, first_new), (second, second_new) = await asyncio.gather(
            sessions.open("tabs", shell(tmp_path)), sessions.open("tabs", shell(tmp_path))
        )
        assert first is second and [first_new, second_new].count(True) == 1 and len(sessions) == 1
        await sessions.close_all()

    run(scenario())
