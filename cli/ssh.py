"""`slipway ssh` (an asyncssh client over a tunnel, or the raw stream for ProxyCommand) and `slipway config-ssh`."""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import os
import shutil
import signal
import socket
import stat
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import click

from cli.client import authenticated_client
from cli.tunnel import (
    CHUNK_SIZE,
    FileDescriptorEnd,
    InterruptibleReader,
    StreamEnd,
    TunnelEndpoint,
    endpoint_for,
    pump,
    write_all,
)
from protocol.publicapi import Workspace

if TYPE_CHECKING:
    import asyncssh

HOST_PREFIX = "slipway."
START_MARKER = "# ------------START-SLIPWAY-----------"
END_MARKER = "# ------------END-SLIPWAY-------------"
DEFAULT_TERM = "xterm-256color"
BRIDGE_CLOSE_SECONDS = 5.0
NO_EXIT_STATUS = 255  # what OpenSSH's client returns when a session ends without an exit status


def workspace_from_host(host: str) -> str:
    """ProxyCommand may be handed "slipway.ws1" (%h); plain "ws1" works too."""
    return host.removeprefix(HOST_PREFIX) or host


@dataclass(frozen=True)
class SessionRequest:
    host: str  # only names the peer (asyncssh needs one for a socket that has no address)
    command: str | None
    pty: bool
    username: str


@click.command(context_settings={"allow_interspersed_args": False})
@click.argument("workspace")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@click.option(
    "--stdio",
    is_flag=True,
    help="Relay the raw SSH stream over stdin/stdout instead of running a client (for OpenSSH's ProxyCommand).",
)
@click.option("--tty", "-t", "force_tty", is_flag=True, help="Request a terminal even when running COMMAND.")
def ssh(workspace: str, command: tuple[str, ...], stdio: bool, force_tty: bool) -> None:
    """Open a shell in WORKSPACE, or run COMMAND there and exit with its status.

    WORKSPACE may name an agent (WORKSPACE.AGENT) and may carry the "slipway." prefix of `config-ssh` hosts.
    Options go before WORKSPACE: everything after it is the remote command.
    """
    if command[:1] == ("--",):  # `slipway ssh WS -- CMD`: as with ssh, "--" only ends the options
        command = command[1:]
    if stdio and (command or force_tty):
        raise click.UsageError("--stdio relays the SSH stream only: it takes no COMMAND and no --tty.")
    endpoint = endpoint_for(workspace_from_host(workspace))
    if stdio:
        relay_stdio(endpoint)
        return
    request = SessionRequest(
        host=HOST_PREFIX + endpoint.target.workspace,
        command=" ".join(command) or None,
        pty=force_tty or (not command and sys.stdin.isatty()),
        username=_local_username(),
    )
    click.get_current_context().exit(run_session(endpoint, request))


def relay_stdio(endpoint: TunnelEndpoint) -> None:
    local = FileDescriptorEnd(sys.stdin.fileno(), sys.stdout.fileno())
    try:
        asyncio.run(_relay_stdio(endpoint, local))
    except KeyboardInterrupt:
        pass
    finally:
        local.close()


async def _relay_stdio(endpoint: TunnelEndpoint, local: FileDescriptorEnd) -> None:
    connection = await endpoint.open(service="ssh")
    relay = asyncio.create_task(pump(connection, local))
    # OpenSSH ends its ProxyCommand with SIGHUP once the session is over: close the tunnel properly rather than
    # die mid-stream, so that the server sees an orderly end.
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGHUP, signal.SIGTERM):
        loop.add_signal_handler(signum, relay.cancel)
    try:
        await relay
    except asyncio.CancelledError:
        if not relay.cancelled():
            raise  # the relay was not what got cancelled: let the cancellation through


def _local_username() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no USER/LOGNAME and no passwd entry (e.g. an arbitrary container uid)
        return "slipway"


def run_session(endpoint: TunnelEndpoint, request: SessionRequest) -> int:
    """Run one SSH session over a tunnel; returns the remote exit status (128 + number for a signal)."""
    stdin = InterruptibleReader(sys.stdin.fileno())
    try:
        return asyncio.run(_session(endpoint, request, stdin))
    except KeyboardInterrupt:
        return 130
    finally:
        stdin.close()


async def _session(endpoint: TunnelEndpoint, request: SessionRequest, stdin: InterruptibleReader) -> int:
    import asyncssh  # imported here: it costs a third of a second, which `--stdio` and other commands need not pay

    connection = await endpoint.open(service="ssh")
    # asyncssh wants a socket: the tunnel is pumped into one end of a socketpair, asyncssh gets the other.
    ssh_socket, pump_socket = socket.socketpair()
    reader, writer = await asyncio.open_connection(sock=pump_socket)
    bridge = asyncio.create_task(pump(connection, StreamEnd(reader, writer)))
    # A tunnel that ends (the server died or restarted, the network went) must end the SSH session too: closing
    # our end of the socketpair is the EOF asyncssh notices; otherwise it would wait for the agent for ever.
    bridge.add_done_callback(lambda _: writer.close())
    try:
        status = await _run_client(ssh_socket, request, stdin)
        if status == NO_EXIT_STATUS:
            # The session ended without a status: most likely the tunnel under it closed, and its reason (e.g. "the
            # server replica is restarting: connect again") says what to do, where a bare 255 says nothing.
            await asyncio.wait({bridge}, timeout=BRIDGE_CLOSE_SECONDS)
            reason = bridge.exception() if bridge.done() and not bridge.cancelled() else None
            if isinstance(reason, click.ClickException):
                raise reason
        return status
    except (asyncssh.Error, OSError) as exc:
        # When the tunnel ended with a reason (the agent's, the server's), that explains more than asyncssh can.
        await asyncio.wait({bridge}, timeout=BRIDGE_CLOSE_SECONDS)
        reason = bridge.exception() if bridge.done() and not bridge.cancelled() else None
        raise (reason if isinstance(reason, click.ClickException) else click.ClickException(f"ssh: {exc}")) from None
    finally:
        ssh_socket.close()
        await asyncio.wait({bridge}, timeout=BRIDGE_CLOSE_SECONDS)  # lets the tunnel close with a proper handshake
        bridge.cancel()
        await asyncio.gather(bridge, return_exceptions=True)
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


async def _run_client(sock: socket.socket, request: SessionRequest, stdin: InterruptibleReader) -> int:
    import asyncssh

    async with asyncssh.connect(
        request.host,
        sock=sock,
        username=request.username,
        known_hosts=None,  # the agent's host key changes with every agent process; the tunnel is authenticated
        config=None,  # ~/.ssh/config may hold our own ProxyCommand hosts; none of it applies to this socket
        client_keys=None,  # the agent asks for no client authentication
        agent_path=None,
    ) as connection:
        terminal: dict[str, object] = {}
        if request.pty:
            terminal = {"term_type": os.environ.get("TERM") or DEFAULT_TERM, "term_size": terminal_size()}
        process: asyncssh.SSHClientProcess[bytes] = await connection.create_process(
            request.command, encoding=None, request_pty="force" if request.pty else False, **terminal
        )
        raw = raw_terminal(sys.stdin.fileno()) if request.pty and sys.stdin.isatty() else contextlib.nullcontext()
        with raw, forwarded_signals(connection, process, pty=request.pty):
            await _exchange(process, stdin)
        return exit_code(process)


async def _exchange(process: asyncssh.SSHClientProcess[bytes], stdin: InterruptibleReader) -> None:
    forwarding_stdin = asyncio.create_task(_forward_stdin(process, stdin))
    try:
        await asyncio.gather(
            _copy_output(process, process.stdout, sys.stdout.fileno()),
            _copy_output(process, process.stderr, sys.stderr.fileno()),
        )
        await process.wait_closed()
    finally:
        stdin.stop()  # frees the executor thread blocked on stdin, so that asyncio.run can shut down
        forwarding_stdin.cancel()
        await asyncio.gather(forwarding_stdin, return_exceptions=True)


async def _forward_stdin(process: asyncssh.SSHClientProcess[bytes], stdin: InterruptibleReader) -> None:
    import asyncssh

    loop = asyncio.get_running_loop()
    try:
        while chunk := await loop.run_in_executor(None, stdin.read):
            process.stdin.write(chunk)
            await process.stdin.drain()
        process.stdin.write_eof()
    except (OSError, asyncssh.Error):
        pass  # the session is over: what was not sent no longer matters


async def _copy_output(process: asyncssh.SSHClientProcess[bytes], stream: asyncssh.SSHReader[bytes], fd: int) -> None:
    try:
        while chunk := await stream.read(CHUNK_SIZE):
            write_all(fd, chunk)
    except BrokenPipeError:
        process.close()  # our reader went away (e.g. `| head`): like OpenSSH, end the session


def exit_code(process: asyncssh.SSHClientProcess[bytes]) -> int:
    if process.exit_signal is not None:
        name = process.exit_signal[0]
        number = getattr(signal, f"SIG{name}", None)
        return 128 + int(number) if number is not None else NO_EXIT_STATUS
    if process.exit_status is not None:
        return process.exit_status
    return NO_EXIT_STATUS


def terminal_size() -> tuple[int, int]:
    """(columns, rows) of the local terminal; 80x24 when there is none."""
    for stream in (sys.stdout, sys.stdin, sys.stderr):
        try:
            size = os.get_terminal_size(stream.fileno())
            return size.columns, size.lines
        except (OSError, ValueError):
            continue
    return 80, 24


@contextlib.contextmanager
def raw_terminal(fd: int) -> Iterator[None]:
    """Every keystroke goes to the remote terminal as typed (Ctrl-C included); the settings always come back."""
    import termios  # POSIX only: imported here so that the rest of the CLI still loads elsewhere
    import tty

    saved = termios.tcgetattr(fd)
    tty.setraw(fd, termios.TCSADRAIN)
    try:
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


@contextlib.contextmanager
def forwarded_signals(
    connection: asyncssh.SSHClientConnection, process: asyncssh.SSHClientProcess[bytes], *, pty: bool
) -> Iterator[None]:
    """While the session runs: SIGWINCH becomes a window-change request (with a PTY); SIGHUP and SIGTERM end the
    session, so that the terminal settings are restored on the way out."""
    loop = asyncio.get_running_loop()
    handled = [signal.SIGHUP, signal.SIGTERM]
    for signum in handled:
        loop.add_signal_handler(signum, connection.close)
    if pty:
        loop.add_signal_handler(signal.SIGWINCH, lambda: process.change_terminal_size(*terminal_size()))
        handled.append(signal.SIGWINCH)
    try:
        yield
    finally:
        for signum in handled:
            loop.remove_signal_handler(signum)


# --- config-ssh -------------------------------------------------------------------------------------------------


def slipway_executable() -> str:
    """The absolute path of the `slipway` being run, for ProxyCommand (OpenSSH's PATH may differ from ours)."""
    invoked = Path(sys.argv[0])
    if invoked.name.startswith("slipway") and invoked.is_file() and os.access(invoked, os.X_OK):
        return os.path.abspath(invoked)
    found = shutil.which("slipway")
    if found:
        return os.path.abspath(found)
    raise click.ClickException("cannot tell where the slipway command is installed: run it by its path")


def quote_command_path(path: str) -> str:
    """``path`` as the first word of a ProxyCommand: ssh expands %-tokens, then `sh -c` runs the line."""
    if "\n" in path or "\r" in path:
        raise click.ClickException(f"cannot use {path!r} in ~/.ssh/config: the path holds a line break")
    escaped = path.replace("%", "%%")
    for special in ("\\", '"', "$", "`"):  # the characters that stay special inside sh double quotes
        escaped = escaped.replace(special, "\\" + special)
    return f'"{escaped}"'


def render_block(workspaces: list[str], executable: str) -> str:
    """The managed block, markers included, ending with a newline."""
    command = quote_command_path(executable)
    lines = [
        START_MARKER,
        "# Written by `slipway config-ssh`: edits inside this block are lost when it runs again.",
        "# Delete the whole block, marker lines included, to undo it.",
        "",
    ]
    for name in workspaces:
        lines += [
            f"Host {HOST_PREFIX}{name}",
            f"  HostName {HOST_PREFIX}{name}",
            f"  ProxyCommand {command} ssh --stdio {name}",
            "  ConnectTimeout 0",
            "  StrictHostKeyChecking no",
            "  UserKnownHostsFile /dev/null",
            "  LogLevel ERROR",
            "",
        ]
    lines.append(END_MARKER)
    return "\n".join(lines) + "\n"


def merge_block(existing: str, block: str, where: str) -> str:
    """``existing`` with its managed block replaced in place, or with ``block`` appended; the rest untouched."""
    lines = existing.splitlines(keepends=True)
    starts = [index for index, line in enumerate(lines) if line.strip() == START_MARKER]
    ends = [index for index, line in enumerate(lines) if line.strip() == END_MARKER]
    if not starts and not ends:
        if existing and not existing.endswith("\n"):
            existing += "\n"
        separator = "" if not existing or existing.endswith("\n\n") else "\n"
        return existing + separator + block
    if len(starts) != 1 or len(ends) != 1 or ends[0] < starts[0]:
        raise click.ClickException(
            f"{where} has a broken slipway block (marker lines missing, repeated or out of order): "
            "fix or remove it by hand, then run `slipway config-ssh` again"
        )
    return "".join(lines[: starts[0]]) + block + "".join(lines[ends[0] + 1 :])


def read_config(path: Path) -> str:
    # surrogateescape keeps bytes that are not UTF-8 exactly as they were when the file is written back.
    try:
        return path.read_bytes().decode("utf-8", "surrogateescape")
    except FileNotFoundError:
        return ""
    except OSError as exc:
        raise click.ClickException(f"cannot read {path}: {exc.strerror}") from None


def write_config(path: Path, content: str) -> None:
    """Replace the file atomically, keeping its mode (0600 for a new one; its directory is created 0700)."""
    target = path.resolve()  # a symlinked config (dotfile managers) keeps its link: write where it points
    try:
        if not target.parent.exists():
            target.parent.mkdir(parents=True, mode=0o700)
            target.parent.chmod(0o700)
        mode = stat.S_IMODE(target.stat().st_mode) if target.exists() else 0o600
        temporary = target.with_name(f".{target.name}.slipway-tmp")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        with os.fdopen(fd, "wb") as handle:
            handle.write(content.encode("utf-8", "surrogateescape"))
        temporary.chmod(mode)
        temporary.replace(target)
    except OSError as exc:
        raise click.ClickException(f"cannot write {path}: {exc.strerror or exc}") from None


def _display(path: Path) -> str:
    home = Path.home()
    return f"~/{path.relative_to(home)}" if path.is_relative_to(home) else str(path)


@click.command("config-ssh")
@click.option(
    "--ssh-config-file",
    type=click.Path(dir_okay=False, path_type=Path),
    default="~/.ssh/config",
    show_default=True,
    help="The OpenSSH client configuration to edit.",
)
@click.option("--dry-run", "-n", is_flag=True, help="Print the block instead of writing it.")
@click.option("--yes", "-y", is_flag=True, help="Write without asking.")
def config_ssh(ssh_config_file: Path, dry_run: bool, yes: bool) -> None:
    """Add a `slipway.<workspace>` host for each of your workspaces to your SSH config.

    Then `ssh slipway.<workspace>`, `scp`, `rsync` and editors' remote modes reach the workspace through Slipway.
    """
    path = ssh_config_file.expanduser().absolute()
    shown = _display(path)
    mine = authenticated_client().get_list(Workspace, "/api/v2/workspaces?owner=me")
    names = sorted(workspace.name for workspace in mine)
    block = render_block(names, slipway_executable())
    existing = read_config(path)
    updated = merge_block(existing, block, shown)
    if dry_run:
        click.echo(block, nl=False)
        click.echo(f"Dry run: {shown} was not changed.", err=True)
        return
    if updated == existing:
        click.echo(f"{shown} is already up to date.")
    else:
        if not yes:
            click.confirm(f"Write {len(names)} host(s) to {shown}?", default=True, abort=True)
        write_config(path, updated)
        click.echo(f"Updated {shown}: {len(names)} workspace host(s).")
    _explain(names)


def _explain(names: list[str]) -> None:
    if not names:
        click.echo("You have no workspaces yet: create one with `slipway create`, then run this again.")
        return
    example = f"{HOST_PREFIX}{names[0]}"
    click.echo("\nYou can now reach your workspaces with OpenSSH tools:")
    for name in names:
        click.echo(f"  ssh {HOST_PREFIX}{name}")
    click.echo(f"  scp file {example}:")
    click.echo(f"  rsync -a ./dir/ {example}:dir/")
    click.echo("Run `slipway config-ssh` again after creating, renaming or deleting workspaces.")
