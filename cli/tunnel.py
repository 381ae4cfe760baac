"""User-side tunnels to a workspace agent (agent/README.md, "Tunnels"), and pumping bytes through them.

A tunnel is one WebSocket: binary frames carry the stream, the text frame ``{"type": "eof"}`` is a half-close,
and a close code of 4000 or more carries the reason the server or agent gave up.
"""

from __future__ import annotations

import asyncio
import json
import os
import select
import time
from dataclasses import dataclass, field
from typing import Protocol
from urllib.parse import urlencode, urlsplit, urlunsplit

import click
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus, WebSocketException

from cli.client import SlipwayClient
from cli.config import load_config
from cli.workspaces import find_workspace
from protocol.agentapi import CLOSE_SERVER_RESTARTING, EOF_MESSAGE, TunnelControl
from protocol.codec import ProtocolError
from protocol.publicapi import Workspace, WorkspaceAgent, WorkspaceResource

CHUNK_SIZE = 256 * 1024  # fewer, larger frames: each one costs the relay a Redis round trip
OPEN_TIMEOUT_SECONDS = 30.0
# The agent reads 64 KiB at a time; the margin only guards against a misbehaving peer.
MAX_FRAME_BYTES = 4 * 1024 * 1024
AGENT_POLL_SECONDS = 1.0
STILL_BUILDING = frozenset({"pending", "starting", "stopping", "canceling"})


class TunnelError(click.ClickException):
    """A tunnel that could not be opened, or that the server or agent closed with a reason."""


@dataclass(frozen=True)
class AgentTarget:
    workspace: str
    agent: str
    agent_id: str


@dataclass(frozen=True)
class TunnelEndpoint:
    """Where tunnels to one agent are opened, with the credential that opens them (kept out of repr)."""

    server_url: str
    token: str = field(repr=False)
    target: AgentTarget

    def url(self, **params: str | int) -> str:
        parts = urlsplit(self.server_url)
        scheme = "wss" if parts.scheme == "https" else "ws"
        path = f"{parts.path.rstrip('/')}/api/v2/workspaceagents/{self.target.agent_id}/tunnel"
        query = urlencode({key: str(value) for key, value in params.items()})
        return urlunsplit((scheme, parts.netloc, path, query, ""))

    async def open(self, **params: str | int) -> ClientConnection:
        """Connect a tunnel (e.g. ``service="tcp", port=8080``); every failure becomes one TunnelError."""
        try:
            return await connect(
                self.url(**params),
                additional_headers={"Authorization": f"Bearer {self.token}"},
                open_timeout=OPEN_TIMEOUT_SECONDS,
                # Tunnels mostly carry SSH, which is encrypted and so incompressible: deflate would only cost CPU.
                compression=None,
                max_size=MAX_FRAME_BYTES,
            )
        except InvalidStatus as exc:
            raise TunnelError(_rejection_message(exc.response.status_code, exc.response.body)) from exc
        except (OSError, WebSocketException) as exc:
            raise TunnelError(f"cannot open a tunnel through {self.server_url}: {exc}") from exc


def _rejection_message(status: int, body: bytes | bytearray | None) -> str:
    """The server's ``{"message": ...}`` for a refused upgrade, or the bare status when the body is not ours."""
    message = f"the server refused the tunnel (HTTP {status})"
    try:
        parsed = json.loads(body or b"")
        if isinstance(parsed, dict) and parsed.get("message"):
            message = str(parsed["message"])
    except ValueError:
        pass
    if status == 401:
        message += " (run `slipway login <url>`)"
    return message


def split_target(argument: str) -> tuple[str, str | None]:
    """``ws1`` or ``ws1.agent`` (workspace names hold no dots, so the first dot separates the agent)."""
    workspace, dot, agent = argument.partition(".")
    if not workspace or (dot and not agent):
        raise click.BadParameter(f"expected WORKSPACE or WORKSPACE.AGENT, got {argument!r}", param_hint="WORKSPACE")
    return workspace, agent or None


def endpoint_for(argument: str) -> TunnelEndpoint:
    """Resolve ``workspace[.agent]`` to a connected agent of a running workspace of the signed-in user."""
    config = load_config()
    if config is None:
        raise click.ClickException(
            "You are not signed in. Run `slipway login <url>`, or set SLIPWAY_URL and SLIPWAY_SESSION_TOKEN."
        )
    target = find_agent(SlipwayClient(config.url, config.token), argument)
    return TunnelEndpoint(config.url, config.token, target)


def find_agent(client: SlipwayClient, argument: str) -> AgentTarget:
    """The agent to tunnel to; waits (with a note on stderr) while it is still connecting for the first time."""
    workspace_name, agent_name = split_target(argument)
    announced = False
    while True:
        workspace = find_workspace(client, workspace_name)
        require_running(workspace)
        agent = choose_agent(workspace_name, agents_of(client, workspace), agent_name)
        if agent.status != "connecting":
            break
        if not announced:
            click.echo(f"Waiting for agent {agent.name} of {workspace_name} to connect...", err=True)
            announced = True
        time.sleep(AGENT_POLL_SECONDS)
    problem = agent_problem(workspace_name, agent)
    if problem:
        raise click.ClickException(problem)
    note = lifecycle_note(workspace_name, agent)
    if note:
        click.echo(note, err=True)
    return AgentTarget(workspace=workspace_name, agent=agent.name, agent_id=agent.id)


def require_running(workspace: Workspace) -> None:
    name, status = workspace.name, workspace.status or "unknown"
    if status == "running":
        return
    if status in STILL_BUILDING:
        raise click.ClickException(
            f"workspace {name} is {status}: wait for its build (`slipway logs {name} --follow`), "
            f"then run `slipway start {name}` if it is not running"
        )
    raise click.ClickException(f"workspace {name} is {status}: run `slipway start {name}`")


def agents_of(client: SlipwayClient, workspace: Workspace) -> list[WorkspaceAgent]:
    build = workspace.latest_build
    resources = build.resources
    if resources is None:  # servers that list a build's resources only on their own endpoint
        resources = tuple(client.get_list(WorkspaceResource, f"/api/v2/workspacebuilds/{build.id}/resources"))
    return [agent for resource in resources for agent in resource.agents]


def choose_agent(workspace: str, agents: list[WorkspaceAgent], wanted: str | None) -> WorkspaceAgent:
    names = ", ".join(sorted(agent.name for agent in agents))
    if not agents:
        raise click.ClickException(f"workspace {workspace} has no agent: its template declares no coder_agent")
    if wanted is not None:
        for agent in agents:
            if agent.name == wanted:
                return agent
        raise click.ClickException(f"workspace {workspace} has no agent named {wanted!r} (its agents: {names})")
    if len(agents) > 1:
        raise click.ClickException(
            f"workspace {workspace} has several agents ({names}): name one as {workspace}.<agent>"
        )
    return agents[0]


def agent_problem(workspace: str, agent: WorkspaceAgent) -> str | None:
    if agent.status == "disconnected":
        return f"agent {agent.name} of {workspace} is disconnected: is the workspace's machine still up?"
    if agent.status == "timeout":
        what = "lost its connection long ago" if agent.first_connected_at else "never connected"
        return (
            f"agent {agent.name} of {workspace} {what} (timed out): "
            f"check `slipway logs {workspace}`, then `slipway stop {workspace}` and `slipway start {workspace}`"
        )
    return None


def lifecycle_note(workspace: str, agent: WorkspaceAgent) -> str | None:
    """A warning worth a line on stderr: the connection works, but the workspace may not be ready yet."""
    state = agent.lifecycle_state
    if state in ("created", "starting"):
        return f"Note: {workspace} is still starting up (its startup scripts have not finished)."
    if state in ("start_error", "start_timeout"):
        return f"Note: a startup script of {workspace} failed or timed out (see `slipway logs {workspace}`)."
    return None


class LocalEnd(Protocol):
    """The local side of a pump: a socket's streams, or stdin and stdout."""

    async def read(self) -> bytes:
        """Up to CHUNK_SIZE bytes; b"" at end of input."""
        ...

    async def write(self, data: bytes) -> None: ...

    def end_writing(self) -> None:
        """Half-close: the peer sent its last byte."""
        ...

    def stop_reading(self) -> None:
        """Make a pending read() return b"" (one that task cancellation cannot reach, in a thread)."""
        ...


class StreamEnd:
    """A connection accepted by asyncio, or asyncio's end of a socketpair."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    async def read(self) -> bytes:
        return await self.reader.read(CHUNK_SIZE)

    async def write(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    def end_writing(self) -> None:
        if self.writer.can_write_eof() and not self.writer.is_closing():
            try:
                self.writer.write_eof()
            except OSError:  # the peer is already gone: nothing left to shut
                pass

    def stop_reading(self) -> None:
        pass  # reads are awaited in the event loop, where cancelling the task is enough


class InterruptibleReader:
    """Reads a file descriptor (stdin, a pipe, a tty) in a thread, in a way another thread can interrupt, which a
    blocking os.read() cannot offer: each read first waits in select() on the descriptor and a private wake-up pipe.
    The descriptor itself stays blocking, as the processes sharing it (a shell, OpenSSH) expect."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._wake_read, self._wake_write = os.pipe()
        self._stopped = False

    def read(self) -> bytes:
        while not self._stopped:
            ready, _, _ = select.select([self.fd, self._wake_read], [], [])
            if self._wake_read in ready:
                break
            try:
                return os.read(self.fd, CHUNK_SIZE)
            except BlockingIOError:  # a non-blocking descriptor that another reader emptied first
                continue
        return b""

    def stop(self) -> None:
        if not self._stopped:
            self._stopped = True
            os.write(self._wake_write, b"x")  # left unread so that every later select() wakes at once

    def close(self) -> None:
        self.stop()
        os.close(self._wake_read)
        os.close(self._wake_write)


def write_all(fd: int, data: bytes) -> None:
    """os.write until every byte is out, also on a descriptor some other process left non-blocking."""
    view = memoryview(data)
    while view:
        try:
            written = os.write(fd, view)
        except BlockingIOError:
            select.select([], [fd], [])
            continue
        view = view[written:]


class FileDescriptorEnd:
    """stdin and stdout, for `slipway ssh --stdio` under OpenSSH's ProxyCommand. Reads and writes block in
    executor threads, so that a slow reader of stdout never stalls the event loop (and with it the tunnel)."""

    def __init__(self, read_fd: int, write_fd: int) -> None:
        self._reader = InterruptibleReader(read_fd)
        self.write_fd = write_fd

    async def read(self) -> bytes:
        return await asyncio.get_running_loop().run_in_executor(None, self._reader.read)

    async def write(self, data: bytes) -> None:
        await asyncio.get_running_loop().run_in_executor(None, write_all, self.write_fd, data)

    def end_writing(self) -> None:
        # Point the descriptor at /dev/null instead of closing it: the reader sees EOF, and the number cannot be
        # handed to a file opened later, which would then receive whatever is still written to "stdout".
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, self.write_fd)
        finally:
            os.close(devnull)

    def stop_reading(self) -> None:
        self._reader.stop()

    def close(self) -> None:
        self._reader.close()


class TunnelPump:
    """Copies bytes both ways between a tunnel and a local end until both directions are done or the tunnel
    closes; whichever direction finishes second closes the WebSocket normally.

    asyncio on purpose: websockets' threaded client holds one lock while a send blocks, which also stops it from
    reading, so a tunnel busy in both directions (an echo, a large scp) could deadlock there."""

    def __init__(self, connection: ClientConnection, local: LocalEnd) -> None:
        self.connection = connection
        self.local = local
        self._directions_done = 0
        self._closing: asyncio.Task[None] | None = None

    async def run(self) -> None:
        upload = asyncio.create_task(self._upload())
        try:
            close = await self._download()
        finally:
            self.local.stop_reading()
            upload.cancel()
            await asyncio.gather(upload, *[self._closing] if self._closing else [], return_exceptions=True)
            await self.connection.close()
        self._raise_for(close)

    async def _upload(self) -> None:
        try:
            while chunk := await self.local.read():
                await self.connection.send(chunk)
            await self.connection.send(EOF_MESSAGE)
        except ConnectionClosed:
            return  # the download side saw it too and reports why
        except OSError:
            # The local side broke (e.g. reset): no orderly end of input will come, so abandon the tunnel.
            await self.connection.close()
            return
        self._direction_done()

    async def _download(self) -> ConnectionClosed | None:
        """Returns how the tunnel closed, or None when the local side went away first."""
        try:
            while True:
                message = await self.connection.recv()
                if isinstance(message, bytes):
                    await self.local.write(message)
                elif _is_eof(message):
                    self.local.end_writing()
                    self._direction_done()
        except ConnectionClosed as exc:
            return exc
        except OSError:
            return None  # the local reader went away (reset, broken pipe): nothing more can be delivered

    def _direction_done(self) -> None:
        self._directions_done += 1
        if self._directions_done == 2:
            # In a task of its own: the download loop must keep reading while the closing handshake runs.
            self._closing = asyncio.create_task(self.connection.close())

    def _raise_for(self, close: ConnectionClosed | None) -> None:
        if close is None:
            return
        frame = close.rcvd
        if frame is None:
            if self._directions_done < 2:
                raise TunnelError("the connection to the server was lost")
            return
        if frame.code == CLOSE_SERVER_RESTARTING:
            raise TunnelError(
                "the tunnel ended: the server replica holding it is restarting; connect again now (another replica "
                "takes it)"
            )
        if frame.code >= 4000:
            raise TunnelError(frame.reason or f"the tunnel was closed (code {frame.code})")
        if frame.code == 1011:
            raise TunnelError(
                f"the server failed while relaying the tunnel{': ' + frame.reason if frame.reason else ''}"
            )


def _is_eof(message: str) -> bool:
    try:
        return TunnelControl.loads(message).type == "eof"
    except ProtocolError:
        return False


async def pump(connection: ClientConnection, local: LocalEnd) -> None:
    """Run a TunnelPump to the end; raises TunnelError when the tunnel closed with a reason."""
    await TunnelPump(connection, local).run()
