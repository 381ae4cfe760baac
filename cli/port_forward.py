"""`slipway port-forward`: local TCP listeners whose connections each open a tunnel to a port in the workspace."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import socket
from dataclasses import dataclass
from functools import partial

import click
from websockets.exceptions import WebSocketException

from cli.tunnel import StreamEnd, TunnelEndpoint, endpoint_for, pump

DEFAULT_BIND_IP = "127.0.0.1"
LISTEN_BACKLOG = 128
SPEC_FORM = "[BIND_IP:]LOCAL[:REMOTE]"


@dataclass(frozen=True)
class PortForward:
    bind_ip: str
    local_port: int
    remote_port: int

    @property
    def local_address(self) -> str:
        return host_and_port(self.bind_ip, self.local_port)


def host_and_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def parse_port_spec(spec: str) -> list[PortForward]:
    """``8080``, ``8080:80``, ``0.0.0.0:8080:80``, ``[::1]:8080``, ranges ``8000-8002:9000-9002`` and comma lists;
    REMOTE defaults to LOCAL. Raises ValueError with a message fit for the user."""
    forwards: list[PortForward] = []
    for item in spec.split(","):
        try:
            forwards += _parse_one(item.strip())
        except ValueError as exc:
            raise ValueError(f"{item.strip()!r}: {exc}") from None
    return forwards


def _parse_one(item: str) -> list[PortForward]:
    bind_ip, ports = _split_bind_ip(item)
    local, colon, remote = ports.partition(":")
    if ":" in remote:
        raise ValueError(f"too many parts, expected {SPEC_FORM}")
    local_ports = _port_range(local)
    remote_ports = _port_range(remote) if colon else local_ports
    if len(remote_ports) != len(local_ports):
        raise ValueError("the local and remote ranges differ in length")
    return [
        PortForward(bind_ip, local_port, remote_port)
        for local_port, remote_port in zip(local_ports, remote_ports, strict=True)
    ]


def _split_bind_ip(item: str) -> tuple[str, str]:
    if item.startswith("["):  # an IPv6 address: its colons would otherwise read as separators
        address, bracket, rest = item[1:].partition("]")
        if not bracket or not rest.startswith(":"):
            raise ValueError("write an IPv6 bind address as [ADDRESS]:LOCAL[:REMOTE]")
        return _checked_ip(address), rest[1:]
    first, colon, rest = item.partition(":")
    if colon and not first.replace("-", "").isdigit():
        return _checked_ip(first), rest
    return DEFAULT_BIND_IP, item


def _checked_ip(address: str) -> str:
    try:
        return str(ipaddress.ip_address(address))
    except ValueError:
        raise ValueError(f"{address or 'an empty field'} is not an IP address to listen on") from None


def _port_range(text: str) -> list[int]:
    first, dash, last = text.partition("-")
    start = _port(first)
    end = _port(last) if dash else start
    if end < start:
        raise ValueError(f"the range {text} runs backwards")
    return list(range(start, end + 1))


def _port(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise ValueError(f"{text or 'an empty field'} is not a port number (1-65535)")
    return int(text)


def _parse_specs(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> list[PortForward]:
    try:
        return [forward for value in values for forward in parse_port_spec(value)]
    except ValueError as exc:
        raise click.BadParameter(str(exc), ctx, param) from None


def open_listener(forward: PortForward) -> socket.socket:
    family = socket.AF_INET6 if ":" in forward.bind_ip else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    try:
        # Lets a restarted port-forward reuse a port whose old connections linger in TIME_WAIT (on Linux it still
        # refuses a port that another program listens on).
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((forward.bind_ip, forward.local_port))
        listener.listen(LISTEN_BACKLOG)
    except OSError as exc:
        listener.close()
        raise click.ClickException(f"cannot listen on {forward.local_address}: {exc.strerror or exc}") from None
    return listener


async def forward_connection(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, forward: PortForward, endpoint: TunnelEndpoint
) -> None:
    """One accepted connection: its own tunnel, pumped both ways; a failure is one line on stderr."""
    try:
        await _forward_and_close(reader, writer, forward, endpoint)
    except asyncio.CancelledError:
        # Ctrl-C cancels every task, and this one may be anywhere: opening, pumping or waiting for the socket to
        # close. End quietly wherever it was: on Python 3.11 asyncio's stream server prints a handler that ends
        # cancelled as "Exception in callback" with a traceback.
        pass


async def _forward_and_close(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, forward: PortForward, endpoint: TunnelEndpoint
) -> None:
    peer = host_and_port(*writer.get_extra_info("peername")[:2])
    where = f"{endpoint.target.workspace}:{forward.remote_port}"
    writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # no Nagle delay
    try:
        tunnel = await endpoint.open(service="tcp", port=forward.remote_port)
        await pump(tunnel, StreamEnd(reader, writer))
    except click.ClickException as exc:
        click.echo(f"Connection from {peer} to {where} failed: {exc.format_message()}", err=True)
    except (OSError, WebSocketException) as exc:
        click.echo(f"Connection from {peer} to {where} failed: {exc}", err=True)
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


async def serve(listeners: list[tuple[socket.socket, PortForward]], endpoint: TunnelEndpoint) -> None:
    """Accept connections on every listener until cancelled (Ctrl-C)."""
    servers = [
        await asyncio.start_server(partial(forward_connection, forward=forward, endpoint=endpoint), sock=listener)
        for listener, forward in listeners
    ]
    await asyncio.gather(*(server.serve_forever() for server in servers))


@click.command("port-forward")
@click.argument("workspace")
@click.option(
    "--tcp",
    "-p",
    "forwards",
    multiple=True,
    callback=_parse_specs,
    metavar=SPEC_FORM,
    help="Forward a local TCP port to a port in the workspace (repeatable; REMOTE defaults to LOCAL; "
    "ranges 8000-8002 and comma lists work too).",
)
def port_forward(workspace: str, forwards: list[PortForward]) -> None:
    """Forward local TCP ports to ports inside WORKSPACE (WORKSPACE.AGENT to pick an agent) until Ctrl-C."""
    if not forwards:
        raise click.UsageError(f"Give at least one --tcp {SPEC_FORM}.")
    addresses = [forward.local_address for forward in forwards]
    repeated = sorted({address for address in addresses if addresses.count(address) > 1})
    if repeated:
        raise click.UsageError(f"Each local address may be forwarded once; repeated: {', '.join(repeated)}.")
    listeners: list[tuple[socket.socket, PortForward]] = []
    try:
        # Listen first: a port that is taken fails at once, before any round trip to the server.
        for forward in forwards:
            listeners.append((open_listener(forward), forward))
        endpoint = endpoint_for(workspace)
        for forward in forwards:
            click.echo(f"Forwarding {forward.local_address} -> {endpoint.target.workspace}:{forward.remote_port}")
        asyncio.run(serve(listeners, endpoint))
    except KeyboardInterrupt:
        pass  # Ctrl-C is how port-forward is meant to end
    finally:
        for listener, _ in listeners:
            listener.close()
