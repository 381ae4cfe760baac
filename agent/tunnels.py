"""Dials from the control connection (README "Tunnels"): connect the target first, then open the tunnel
WebSocket, or tell the server why the target could not be reached.

On an open tunnel binary frames are the stream's bytes and text frames are JSON control messages: ``eof`` is a
half-close, ``resize`` changes a terminal's size, ``exit`` reports how a terminal's process ended.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Callable

from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed

from agent.api import AgentAPI, AgentAPIError, ServerUnavailable
from agent.environment import SessionContext, shell_invocation
from agent.ssh_service import SSHService
from agent.terminal import PtyProcess
from agent.terminal_sessions import TerminalSessions, TooManySessions
from protocol.agentapi import EOF_MESSAGE, Dial, TunnelControl
from protocol.codec import ProtocolError

log = logging.getLogger(__name__)

READ_CHUNK = 256 * 1024  # fewer, larger frames: each one costs the relay a Redis round trip
DIAL_TIMEOUT = 10.0
DEFAULT_HOST = "127.0.0.1"
WEB_TERMINAL_TERM = "xterm-256color"  # the dashboard's terminal is xterm.js
CLOSE_WAIT = 5.0


class DialRefused(Exception):
    """The dial cannot be served; the message goes back to the user through the server."""


def describe_connect_error(host: str, port: int, exc: BaseException) -> str:
    if isinstance(exc, ConnectionRefusedError):
        return f"connection refused: nothing listens on {host}:{port}"
    if isinstance(exc, TimeoutError):
        return f"timed out connecting to {host}:{port}"
    if isinstance(exc, socket.gaierror):
        return f"cannot resolve {host}: {exc.strerror or exc}"
    if isinstance(exc, OSError):
        return f"cannot connect to {host}:{port}: {exc.strerror or exc}"
    return f"cannot connect to {host}:{port}: {exc}"


def control_message(message: str | bytes) -> TunnelControl | None:
    """A tunnel's text frame, or None for anything that is not one (ignored)."""
    try:
        return TunnelControl.loads(message)
    except ProtocolError:
        return None


def control_dial(message: str) -> Dial | None:
    """A dial from the control connection, or None (logged) for anything else."""
    try:
        return Dial.loads(message)
    except ProtocolError as exc:
        log.warning("ignoring a control message that is not a dial: %s", exc)
        return None


def _dimension(value: int, default: int) -> int:
    return value if value > 0 else default


async def _socket_to_websocket(reader: asyncio.StreamReader, websocket: ClientConnection) -> None:
    while chunk := await reader.read(READ_CHUNK):
        await websocket.send(chunk)
    await websocket.send(EOF_MESSAGE)


async def _websocket_to_socket(websocket: ClientConnection, writer: asyncio.StreamWriter, eof: asyncio.Event) -> None:
    with contextlib.suppress(ConnectionClosed):
        async for message in websocket:
            if isinstance(message, bytes):
                writer.write(message)
                await writer.drain()
            elif (control := control_message(message)) is not None and control.type == "eof" and not eof.is_set():
                eof.set()
                if writer.can_write_eof():
                    writer.write_eof()


async def relay_stream(websocket: ClientConnection, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Pump bytes both ways until the WebSocket closes or both sides have sent EOF."""
    peer_eof = asyncio.Event()
    upstream = asyncio.create_task(_socket_to_websocket(reader, websocket))
    downstream = asyncio.create_task(_websocket_to_socket(websocket, writer, peer_eof))

    async def both_finished() -> None:
        await upstream
        await peer_eof.wait()

    finished = asyncio.create_task(both_finished())
    tasks = [upstream, downstream, finished]
    try:
        await asyncio.wait({downstream, finished}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        for result in results:
            if isinstance(result, Exception) and not isinstance(result, ConnectionClosed):
                log.debug("tunnel stream ended: %s", result)


async def relay_terminal(websocket: ClientConnection, pty: PtyProcess) -> None:
    """Terminal output as binary frames, input from binary frames, ``resize`` messages, and ``exit`` at the end."""

    async def output() -> None:
        while chunk := await pty.read():
            await websocket.send(chunk)

    async def user_input() -> None:
        with contextlib.suppress(ConnectionClosed):
            async for message in websocket:
                if isinstance(message, bytes):
                    await pty.write(message)
                    continue
                control = control_message(message)
                if control is not None and control.type == "resize":
                    pty.resize(_dimension(control.rows, 24), _dimension(control.cols, 80))

    output_task, input_task = asyncio.create_task(output()), asyncio.create_task(user_input())
    exited = asyncio.create_task(pty.wait())
    try:
        await asyncio.wait({output_task, input_task}, return_when=asyncio.FIRST_COMPLETED)
        if output_task.done() and not input_task.done():
            await asyncio.wait({exited, input_task}, return_when=asyncio.FIRST_COMPLETED)
            if exited.done():
                with contextlib.suppress(ConnectionClosed):
                    await websocket.send(TunnelControl(type="exit", code=exited.result()).dumps())
    finally:
        for task in (output_task, input_task, exited):
            task.cancel()
        await asyncio.gather(output_task, input_task, exited, return_exceptions=True)
        await pty.hang_up()


class TunnelDialer:
    def __init__(self, api: AgentAPI, ssh: SSHService, context: Callable[[], SessionContext]) -> None:
        self._api = api
        self._ssh = ssh
        self._context = context
        self._tasks: set[asyncio.Task[None]] = set()
        self._terminals = TerminalSessions()

    def dial(self, dial: Dial) -> None:
        """Serve one dial in the background."""
        task = asyncio.create_task(self._dial(dial))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def close_all(self, timeout: float = CLOSE_WAIT) -> None:
        """End every tunnel: SSH connections close, terminals hang up, forwarded connections are cut."""
        await self._ssh.close_all(timeout)
        await self._terminals.close_all()
        tasks = set(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=timeout)

    async def _dial(self, dial: Dial) -> None:
        tunnel_id, service = dial.tunnel_id, dial.service
        if not tunnel_id:
            log.warning("ignoring a dial without a tunnel_id")
            return
        try:
            if service == "tcp":
                await self._dial_tcp(tunnel_id, dial)
            elif service == "ssh":
                await self._dial_ssh(tunnel_id)
            else:
                await self._dial_pty(tunnel_id, dial)
        except DialRefused as refused:
            log.info("dial %s (%s) failed: %s", tunnel_id, service, refused)
            with contextlib.suppress(ServerUnavailable, AgentAPIError):
                websocket = await self._api.open_tunnel(tunnel_id, error=str(refused))
                await websocket.close()
        except (ServerUnavailable, AgentAPIError) as exc:
            log.warning("tunnel %s (%s) could not be opened: %s", tunnel_id, service, exc)
        except Exception:
            log.exception("tunnel %s (%s) failed", tunnel_id, service)

    async def _relay_connection(
        self, tunnel_id: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        try:
            websocket = await self._api.open_tunnel(tunnel_id)
            try:
                await relay_stream(websocket, reader, writer)
            finally:
                await websocket.close()
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    async def _dial_tcp(self, tunnel_id: str, dial: Dial) -> None:
        host, port = dial.host or DEFAULT_HOST, dial.port
        if not 0 < port < 65536:
            raise DialRefused(f"invalid address {host!r}:{port!r}")
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), DIAL_TIMEOUT)
        except (OSError, TimeoutError) as exc:
            raise DialRefused(describe_connect_error(host, port, exc)) from None
        await self._relay_connection(tunnel_id, reader, writer)

    async def _dial_ssh(self, tunnel_id: str) -> None:
        server_end, tunnel_end = socket.socketpair()
        serving = asyncio.create_task(self._ssh.serve(server_end))
        try:
            reader, writer = await asyncio.open_connection(sock=tunnel_end)
        except OSError:
            tunnel_end.close()
            serving.cancel()
            raise
        try:
            await self._relay_connection(tunnel_id, reader, writer)
        finally:
            # Our end is closed: the SSH connection sees EOF and ends, and its sessions hang up.
            await asyncio.wait({serving}, timeout=CLOSE_WAIT)
            serving.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await serving

    async def _spawn_terminal(self, dial: Dial) -> PtyProcess:
        context = self._context()
        argv, executable = shell_invocation(dial.command if dial.command.strip() else None)
        environ = {**context.environment, "TERM": WEB_TERMINAL_TERM}
        try:
            pty = await PtyProcess.spawn(
                argv,
                executable=executable,
                cwd=context.directory,
                env=environ,
                rows=_dimension(dial.rows, 24),
                cols=_dimension(dial.cols, 80),
            )
        except OSError as exc:
            raise DialRefused(f"cannot start {executable}: {exc.strerror or exc}") from None
        self._ssh.leftovers.add(pty.pid)  # a web terminal's leftovers go with the SSH sessions' at shutdown
        return pty

    async def _dial_reconnecting_pty(self, tunnel_id: str, dial: Dial) -> None:
        """Attach the tunnel to terminal session ``dial.reconnect``, started if it is not kept."""
        try:
            session, new = await self._terminals.open(dial.reconnect, lambda: self._spawn_terminal(dial))
        except TooManySessions as exc:
            raise DialRefused(str(exc)) from None
        try:
            websocket = await self._api.open_tunnel(tunnel_id)
        except BaseException:
            if new:
                await session.close()
            raise
        try:
            await session.attach(websocket, _dimension(dial.rows, 24), _dimension(dial.cols, 80))
        finally:
            await websocket.close()

    async def _dial_pty(self, tunnel_id: str, dial: Dial) -> None:
        if dial.reconnect:
            await self._dial_reconnecting_pty(tunnel_id, dial)
            return
        pty = await self._spawn_terminal(dial)
        try:
            websocket = await self._api.open_tunnel(tunnel_id)
        except BaseException:
            await pty.hang_up()
            raise
        try:
            await relay_terminal(websocket, pty)
        finally:
            await websocket.close()
