"""Helpers for the agent's tests: running coroutines, free ports, and an SSH service reachable two ways."""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import asyncssh

from agent.config import TOKEN_VARIABLES
from agent.environment import SessionContext
from agent.sshd import SSHService

T = TypeVar("T")


def run(coroutine: Coroutine[Any, Any, T], timeout: float = 60) -> T:
    async def bounded() -> T:
        return await asyncio.wait_for(coroutine, timeout)

    return asyncio.run(bounded())


def session_context(directory: Path, home: Path, **extra: str) -> SessionContext:
    environment = {name: value for name, value in os.environ.items() if name not in TOKEN_VARIABLES}
    environment.update(HOME=str(home), **extra)
    return SessionContext(directory=directory, environment=environment)


@asynccontextmanager
async def ssh_over_socketpair(service: SSHService) -> AsyncIterator[asyncssh.SSHClientConnection]:
    """A real asyncssh client talking to the service over a socket pair, as a tunnel would."""
    server_end, client_end = socket.socketpair()
    serving = asyncio.create_task(service.serve(server_end))
    # A socket pair has no peer address, so the client is told a host name to know the server by.
    connection = await asyncssh.connect(
        "workspace", sock=client_end, username="alice", known_hosts=None, agent_path=None, client_keys=None, config=None
    )
    try:
        yield connection
    finally:
        connection.close()
        await connection.wait_closed()
        await asyncio.wait_for(serving, 10)


@asynccontextmanager
async def ssh_on_loopback(service: SSHService) -> AsyncIterator[int]:
    """A TCP port on 127.0.0.1 whose every connection is handed to the service: for OpenSSH's own client."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.setblocking(False)
    loop = asyncio.get_running_loop()
    serving: set[asyncio.Task[None]] = set()

    async def accept_forever() -> None:
        while True:
            connection, _ = await loop.sock_accept(listener)
            serving.add(asyncio.create_task(service.serve(connection)))

    acceptor = asyncio.create_task(accept_forever())
    try:
        yield listener.getsockname()[1]
    finally:
        acceptor.cancel()
        await asyncio.gather(acceptor, return_exceptions=True)
        listener.close()
        await service.close_all()
        if serving:
            await asyncio.wait(serving, timeout=10)


OPENSSH_OPTIONS = [
    "-F",
    "/dev/null",
    "-o",
    "StrictHostKeyChecking=no",
    "-o",
    "UserKnownHostsFile=/dev/null",
    "-o",
    "BatchMode=yes",
    "-o",
    "LogLevel=ERROR",
    "-o",
    "IdentityAgent=none",
]


async def run_tool(*argv: str, stdin: bytes | None = None, timeout: float = 60) -> tuple[int, bytes, bytes]:
    process = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        stdout, stderr = await asyncio.wait_for(process.communicate(stdin), timeout)
    except BaseException:
        process.kill()
        await process.wait()
        raise
    assert process.returncode is not None
    return process.returncode, stdout, stderr


def pid_alive(pid: int) -> bool:
    """Running, not a zombie waiting for a parent that does not reap (PID 1 of a container may not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"
