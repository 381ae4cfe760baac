"""The agent's SSH server (asyncssh), run over one end of a socket pair for each ``ssh`` dial: no listening port.

There is no client authentication: the server checked who may dial before the tunnel existed. Sessions get a
shell or run a command (exit status or exit signal reported), on a PTY when asked (window changes follow), with
the client's environment requests; SFTP and scp are served from the user's home directory as OpenSSH does,
``direct-tcpip`` channels (``ssh -L``) are forwarded, and so are remote forwards (``ssh -R``, to a TCP port or a
unix socket). The host key is generated once per agent process.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import asyncssh

from agent.environment import SessionContext, expand_path, home_directory, shell_invocation
from agent.processes import PipedProcess, PipeWriter, ProcessGroups, signal_group, spawn_piped
from agent.terminal import PtyProcess

log = logging.getLogger(__name__)

READ_CHUNK = 64 * 1024
CLOSE_WAIT = 5.0
LOGIN_TIMEOUT = 30.0

SessionContextSource = Callable[[], SessionContext]


class _AgentSSHServer(asyncssh.SSHServer):
    def __init__(self, connections: set[asyncssh.SSHServerConnection]) -> None:
        self._connections = connections
        self._connection: asyncssh.SSHServerConnection | None = None

    def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
        self._connection = conn
        self._connections.add(conn)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._connection is not None:
            self._connections.discard(self._connection)

    def begin_auth(self, username: str) -> bool:
        return False  # any user name, no authentication: the dial itself was authorised by the server

    def connection_requested(self, dest_host: str, dest_port: int, orig_host: str, orig_port: int) -> bool:
        log.debug("ssh: forwarding a connection to %s:%d", dest_host, dest_port)
        return True  # asyncssh connects dest_host:dest_port and relays the channel

    # `ssh -R`, as Coder's agent allows it: asyncssh listens inside the workspace (where the client asked: OpenSSH
    # asks for loopback unless given an address) and opens a channel back to the client for each connection; the
    # listeners end with the connection.
    def server_requested(self, listen_host: str, listen_port: int) -> bool:
        log.debug("ssh: remote forwarding from %s:%d", listen_host, listen_port)
        return True

    def unix_server_requested(self, listen_path: str) -> bool:
        """OpenSSH's streamlocal-forward@openssh.com: ``ssh -R /path/in/workspace.sock:…``."""
        log.debug("ssh: remote forwarding from %s", listen_path)
        return True


class _HomeSFTPServer(asyncssh.SFTPServer):
    """Relative paths start at the home directory, as with OpenSSH's sftp-server (``scp file host:``)."""

    def __init__(self, chan: asyncssh.SSHServerChannel[bytes], home: str) -> None:
        super().__init__(chan)
        self._home = os.fsencode(home)

    def map_path(self, path: bytes) -> bytes:
        if path.startswith(b"/"):
            return path
        return os.path.join(self._home, path) if path else self._home

    def exit(self) -> None:
        # OpenSSH's sftp-server is a process whose exit status 0 sshd reports; asyncssh's in-process server would
        # close the channel without one, and OpenSSH's scp (which uses SFTP) then fails an intact copy.
        self.channel.exit(0)


def _report_exit(process: asyncssh.SSHServerProcess[bytes], returncode: int) -> None:
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name.removeprefix("SIG")
        except ValueError:
            name = str(-returncode)
        process.exit_with_signal(name)
    else:
        process.exit(returncode)


def _signal_number(name: str) -> int | None:
    value = getattr(signal, f"SIG{name}", None)
    return int(value) if isinstance(value, signal.Signals) else None


async def _finished_before_close(process: asyncssh.SSHServerProcess[bytes], task: asyncio.Future[Any]) -> bool:
    """Wait for ``task``; False when the client closed the channel first (the caller cancels the task)."""
    closed = asyncio.ensure_future(process.channel.wait_closed())
    try:
        await asyncio.wait({task, closed}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        closed.cancel()
    return task.done()


class SSHService:
    def __init__(self, context: SessionContextSource, leftovers: ProcessGroups | None = None) -> None:
        self._context = context
        # Sessions' process groups: what users leave running (nohup … &) is stopped when the agent shuts down.
        self.leftovers = leftovers or ProcessGroups()
        self._host_key = asyncssh.generate_private_key("ssh-ed25519")
        self._connections: set[asyncssh.SSHServerConnection] = set()
        self._sessions: set[asyncio.Task[Any]] = set()

    async def serve(self, sock: socket.socket) -> None:
        """Run one SSH connection over ``sock`` (already connected) until it closes."""
        try:
            connection = await asyncssh.run_server(
                sock,
                server_factory=lambda: _AgentSSHServer(self._connections),
                server_host_keys=[self._host_key],
                process_factory=self._run_session,
                sftp_factory=lambda chan: _HomeSFTPServer(chan, home_directory(self._context().environment)),
                allow_scp=True,
                encoding=None,
                line_editor=False,  # the PTY's own line discipline echoes and edits
                login_timeout=LOGIN_TIMEOUT,
            )
        except (asyncssh.Error, OSError) as exc:
            log.debug("ssh: the connection ended during the handshake: %s", exc)
            sock.close()
            return
        await connection.wait_closed()

    async def close_all(self, timeout: float = CLOSE_WAIT) -> None:
        """Close every connection; sessions hang up their processes."""
        for connection in list(self._connections):
            connection.close()
        if self._sessions:
            await asyncio.wait(set(self._sessions), timeout=timeout)

    def _environment(self, context: SessionContext, process: asyncssh.SSHServerProcess[bytes]) -> dict[str, str]:
        environ = dict(context.environment)
        environ.update(process.env)
        environ["SSH_CLIENT"] = "127.0.0.1 0 22"  # some tools only look for these to know they are remote
        environ["SSH_CONNECTION"] = "127.0.0.1 0 127.0.0.1 22"
        agent_path = process.channel.get_agent_path()
        if agent_path:
            environ["SSH_AUTH_SOCK"] = agent_path
        if process.term_type:
            environ["TERM"] = process.term_type
        return environ

    async def _run_session(self, process: asyncssh.SSHServerProcess[bytes]) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._sessions.add(task)
        try:
            await self._run_session_command(process)
        except (asyncssh.Error, BrokenPipeError, ConnectionError) as exc:
            log.debug("ssh: session ended: %s", exc)
        finally:
            if task is not None:
                self._sessions.discard(task)

    async def _run_session_command(self, process: asyncssh.SSHServerProcess[bytes]) -> None:
        if process.subsystem:
            process.stderr.write(f"subsystem {process.subsystem!r} is not supported\n".encode())
            process.exit(127)
            return
        context = self._context()
        argv, executable = shell_invocation(process.command)
        environ = self._environment(context, process)
        try:
            if process.term_type is not None:
                await self._run_on_pty(process, context, argv, executable, environ)
            else:
                await self._run_with_pipes(process, context, argv, executable, environ)
        except OSError as exc:  # the shell could not be started (missing, directory gone, ...)
            process.stderr.write(f"slipway agent: cannot start {executable}: {exc}\r\n".encode())
            process.exit(127)

    # PTY sessions --------------------------------------------------------------------------------------------

    @staticmethod
    def _show_motd(process: asyncssh.SSHServerProcess[bytes], context: SessionContext) -> None:
        if not context.motd_file.strip():
            return
        home = Path(home_directory(context.environment))
        if (home / ".hushlogin").exists():
            return
        with contextlib.suppress(OSError):
            text = Path(expand_path(context.motd_file, context.environment)).read_bytes()
            process.stdout.write(text.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n"))

    @staticmethod
    async def _pty_input(process: asyncssh.SSHServerProcess[bytes], pty: PtyProcess) -> None:
        while True:
            try:
                data = await process.stdin.read(READ_CHUNK)
            except asyncssh.TerminalSizeChanged as change:
                pty.resize(change.height, change.width)
                continue
            except asyncssh.BreakReceived:
                pty.signal(signal.SIGINT)
                continue
            except asyncssh.SignalReceived as received:
                number = _signal_number(received.signal)
                if number is not None:
                    pty.signal(number)
                continue
            if not data:
                return  # a terminal has no half-close: the process carries on until it ends
            await pty.write(data)

    @staticmethod
    async def _pty_output(process: asyncssh.SSHServerProcess[bytes], pty: PtyProcess) -> None:
        while chunk := await pty.read():
            process.stdout.write(chunk)
            await process.stdout.drain()

    async def _run_on_pty(
        self,
        process: asyncssh.SSHServerProcess[bytes],
        context: SessionContext,
        argv: list[str],
        executable: str,
        environ: Mapping[str, str],
    ) -> None:
        cols, rows, _, _ = process.term_size
        if process.command is None:
            self._show_motd(process, context)
        pty = await PtyProcess.spawn(
            argv,
            executable=executable,
            cwd=context.directory,
            env=environ,
            rows=rows or 24,
            cols=cols or 80,
            tty_variable="SSH_TTY",
        )
        self.leftovers.add(pty.pid)  # it leads its own session, hence its group
        output = asyncio.create_task(self._pty_output(process, pty))
        exited = asyncio.create_task(pty.process.wait())
        tasks: list[asyncio.Task[Any]] = [asyncio.create_task(self._pty_input(process, pty)), output, exited]
        try:
            if await _finished_before_close(process, output) and await _finished_before_close(process, exited):
                _report_exit(process, exited.result())
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await pty.hang_up()

    # Sessions without a PTY (exec, sftp-less file copies such as rsync) ------------------------------------

    @staticmethod
    async def _pipe_input(process: asyncssh.SSHServerProcess[bytes], stdin: PipeWriter, pgid: int) -> None:
        while True:
            try:
                data = await process.stdin.read(READ_CHUNK)
            except asyncssh.BreakReceived:
                signal_group(pgid, signal.SIGINT)
                continue
            except asyncssh.SignalReceived as received:
                number = _signal_number(received.signal)
                if number is not None:
                    signal_group(pgid, number)
                continue
            except asyncssh.TerminalSizeChanged:
                continue
            if not data:
                stdin.close()  # the client's EOF becomes the process's EOF
                return
            await stdin.write(data)

    @staticmethod
    async def _pipe_output(source: asyncio.StreamReader, target: asyncssh.SSHWriter[bytes]) -> None:
        while chunk := await source.read(READ_CHUNK):
            target.write(chunk)
            await target.drain()

    async def _run_with_pipes(
        self,
        process: asyncssh.SSHServerProcess[bytes],
        context: SessionContext,
        argv: list[str],
        executable: str,
        environ: Mapping[str, str],
    ) -> None:
        piped = await spawn_piped(argv, executable=executable, cwd=context.directory, env=environ, with_stdin=True)
        self.leftovers.add(piped.pgid)
        stdin = piped.stdin or PipeWriter()
        input_pump = asyncio.create_task(self._pipe_input(process, stdin, piped.pgid))
        output_pumps = [
            asyncio.create_task(self._pipe_output(piped.stdout, process.stdout)),
            asyncio.create_task(self._pipe_output(piped.stderr, process.stderr)),
        ]

        async def finish() -> int:
            # Like OpenSSH, the session ends when the process has exited and its output is closed.
            returncode = await piped.process.wait()
            await asyncio.gather(*output_pumps)
            return returncode

        finishing = asyncio.create_task(finish())
        try:
            if await _finished_before_close(process, finishing):
                process.stdout.write_eof()
                _report_exit(process, finishing.result())
        finally:
            for task in [finishing, input_pump, *output_pumps]:
                task.cancel()
            await asyncio.gather(finishing, input_pump, *output_pumps, return_exceptions=True)
            await self._hang_up(piped)
            piped.close_pipes()

    @staticmethod
    async def _hang_up(piped: PipedProcess) -> None:
        """The client went away: SIGHUP the group as a closing terminal would. Only the shell itself is killed
        if it ignores that; a ``nohup``-ed child it started carries on."""
        if piped.process.returncode is not None:
            return
        signal_group(piped.pgid, signal.SIGHUP)
        try:
            await asyncio.wait_for(asyncio.shield(piped.process.wait()), CLOSE_WAIT)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                piped.process.kill()
            await piped.process.wait()
