"""The provider zygote: one process per daemon with the provider imported, forking a child per plugin launch.

`python -m workers.coder_provider.zygote SOCKET` (started by `workers/provider_zygote.py`). It listens on SOCKET and
does nothing but accept and fork, so no client can hold it up; everything a request carries is read by the child
(`workers/provider_launch.py` is the other side). The zygote's own environment holds no build's values and no
daemon secret; each child replaces it with its launcher's environment before the provider reads any of it.

Its stdin is a pipe from the daemon: end of file means the daemon is gone (the zygote exits with it), and each
read from it is answered on stdout with the number of children forked so far, the daemon's proof that the zygote
still answers.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import socket
import sys
import threading
from pathlib import Path

# Imported here once, so that no child pays for them: grpc, the plugin protocol, and what `tf` reads its
# certificate with (it imports cryptography lazily, on the first serve).
import grpc  # type: ignore[import-untyped]  # noqa: F401
from cryptography import x509  # noqa: F401
from cryptography.hazmat.primitives import hashes, serialization  # noqa: F401
from cryptography.hazmat.primitives.asymmetric import rsa  # noqa: F401
from tf.gen import grpc_controller_pb2_grpc, grpc_stdio_pb2_grpc, tfplugin_pb2_grpc  # noqa: F401
from tf.runner import _self_signed_cert

from protocol.provider_zygote import HEADER_SIZE, decode_header
from workers.coder_provider.framework import read_refined_unknowns, serve
from workers.coder_provider.provider import CoderProvider

# A child gets this long to read its request; a client that connects and says nothing only costs a child.
_REQUEST_TIMEOUT = 30.0


def main() -> None:
    read_refined_unknowns()
    _cache_certificate()
    path = sys.argv[1]
    # Children are reaped by the kernel: the zygote never waits for one.
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    # The daemon stops the zygote by closing its stdin; a terminal's Ctrl-C is the daemon's to handle.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    Path(path).unlink(missing_ok=True)  # a socket left by a zygote that was killed
    listener.bind(path + ".new")  # within sun_path: workers/provider_zygote.py leaves room for the suffix
    os.chmod(path + ".new", 0o600)
    listener.listen(128)
    os.replace(path + ".new", path)  # the socket appears only once it is listening
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    selector.register(sys.stdin.fileno(), selectors.EVENT_READ)
    forked = 0
    try:
        while True:
            for key, _ in selector.select():
                if key.fileobj is listener:
                    forked += _accept(listener)
                elif not _answer(forked):
                    return
    finally:
        Path(path).unlink(missing_ok=True)


def _cache_certificate() -> None:
    """Have `tf` make (or check) its cached certificate in a throwaway child: the first build does not pay for
    the key, and the zygote itself creates no grpc object that its children would inherit half-initialised."""
    pid = os.fork()
    if pid == 0:
        try:
            _self_signed_cert()
        finally:
            os._exit(0)
    os.waitpid(pid, 0)


def _answer(forked: int) -> bool:
    if not os.read(sys.stdin.fileno(), 64):
        return False
    os.write(sys.stdout.fileno(), f"{forked}\n".encode())
    return True


def _accept(listener: socket.socket) -> int:
    """Fork a child for the next launcher; the number forked (0 or 1)."""
    try:
        connection, _ = listener.accept()
    except OSError:
        return 0
    if os.fork() == 0:
        status = 1
        try:
            listener.close()
            _child(connection)
            status = 0
        finally:
            os._exit(status)  # never back into the zygote's loop, nor its exit handlers
    connection.close()
    return 1


def _child(connection: socket.socket) -> None:
    """Serve the provider with the launcher's environment and stderr, until Terraform shuts it down or the
    launcher goes away."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    connection.settimeout(_REQUEST_TIMEOUT)
    environment = json.loads(_read_exactly(connection, decode_header(_read_exactly(connection, HEADER_SIZE))))
    connection.sendall(f"{os.getpid()}\n".encode())
    _, fds, _, _ = socket.recv_fds(connection, 1, 1)
    if len(fds) != 1:
        raise ConnectionError("the launcher sent no stderr")
    # Off the zygote's pipes to the daemon: nothing is printed after the handshake, and should anything be, it
    # lands in Terraform's log.
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    os.dup2(fds[0], 1)
    os.dup2(fds[0], 2)
    os.environ.clear()
    os.environ.update({str(name): str(value) for name, value in environment.items()})
    connection.settimeout(None)

    def announce(line: str) -> None:
        connection.sendall(line.encode())
        # From now on the launcher only waits: its end closing means Terraform killed it.
        threading.Thread(target=_exit_with_launcher, args=(connection,), daemon=True).start()

    serve(CoderProvider(), announce=announce)


def _read_exactly(connection: socket.socket, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = connection.recv(min(size - len(data), 1 << 20))
        if not chunk:
            raise ConnectionError("the launcher went away mid-request")
        data += chunk
    return bytes(data)


def _exit_with_launcher(connection: socket.socket) -> None:
    try:
        while connection.recv(64):
            pass
    except OSError:
        pass
    os._exit(0)


if __name__ == "__main__":
    main()
