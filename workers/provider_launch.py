"""The plugin executable's body: ask this daemon's warm provider zygote for a provider, else serve one here.

Terraform starts the `coder/coder` plugin several times a build (validate, plan, apply), and a Python provider
that imports grpc, `tf` and our schema costs a quarter of a second or more each time. The daemon therefore keeps
one process with all of that imported (`workers/coder_provider/zygote.py`). This launcher, started by Terraform as
before, imports only the standard library (the mirror's script runs Python with `-IS`), hands the zygote its own
environment (the build's CODER_* values), then its stderr, and relays the go-plugin handshake of the child the
zygote forks for it. The child serves this launcher's values only: it is forked from a zygote that holds no
build's values, once per launcher, and it exits when the launcher goes (Terraform's shutdown or kill).

Anything wrong with the zygote (none configured, not listening yet, dead, hung) and the launcher serves the
provider itself, as every launch did before: a build never fails for the zygote's sake.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
from collections.abc import Iterator

from protocol.provider_zygote import DEFAULT_TIMEOUT, STDERR_MARK, TIMEOUT_ENV, ZYGOTE_ENV, encode_header


def main() -> None:
    # As go-plugin's plugins do: an interrupt is Terraform's to handle; it stops its providers itself.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    path = os.environ.pop(ZYGOTE_ENV, "")
    try:
        timeout = float(os.environ.pop(TIMEOUT_ENV, "") or DEFAULT_TIMEOUT)
    except ValueError:
        timeout = DEFAULT_TIMEOUT
    connection = _spawn(path, timeout) if path else None
    if connection is None:
        _serve_here()
        return
    # The child serves until Terraform shuts it down; its end of the connection closes when it exits.
    with connection:
        while connection.recv(4096):
            pass


def _spawn(path: str, timeout: float) -> socket.socket | None:
    """Ask the zygote for a child serving this environment; relay its handshake. None: the zygote failed us."""
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    connection.settimeout(timeout)
    child = 0
    try:
        connection.connect(path)
        payload = json.dumps(dict(os.environ)).encode()
        connection.sendall(encode_header(len(payload)) + payload)
        lines = _lines(connection)
        child = int(next(lines))
        # Our stderr only to a child that answered: a descriptor in flight to a zygote that hangs would keep
        # Terraform's pipe open, and Terraform waits for its plugins' pipes to close.
        socket.send_fds(connection, [STDERR_MARK], [sys.stderr.fileno()])
        handshake = next(lines)
    except (OSError, ValueError, StopIteration):
        if child:
            _kill(child)  # hung or half-started: it must not serve anyone
        connection.close()
        return None
    sys.stdout.write(handshake + "\n")
    sys.stdout.flush()
    connection.settimeout(None)
    return connection


def _lines(connection: socket.socket) -> Iterator[str]:
    buffer = b""
    while True:
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            yield line.decode()
        chunk = connection.recv(4096)
        if not chunk:
            return
        buffer += chunk


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass  # gone already


def _serve_here() -> None:
    """The provider in this process, as before the zygote: site-packages (skipped by `-S`) first."""
    import site

    site.main()
    from workers.coder_provider import main as serve

    serve()
