"""The agent's Git helper socket: how ``git`` in the workspace gets the owner's tokens without holding the agent's
own token (which nothing the agent starts inherits).

A unix socket, mode 0600, in the agent's runtime directory (agent/runtime_dir.py). Each connection sends one JSON
line and gets one back:

  {"op": "external-auth", "match": "<remote url>", "id": "<provider id>", "listen": bool, "secret": "…"}
      -> {"ok": <ExternalAuthReply>} | {"error": "<message>", "status": <http status>}
  {"op": "gitsshkey", "secret": "…"} -> {"ok": <GitSSHKeyReply>} | {"error": …}

Who may ask (issue 34, H1). The socket's mode keeps other OS users out, but workspaces of different people may run
as one OS user (every workspace of examples/local is the provisioner's user), and Landlock does not cover
connecting to a socket. So every request must carry ``secret``: a random value the agent makes at each start and
puts only in the environment of what it starts (scripts, SSH sessions, terminals: ``SLIPWAY_AGENT_GIT_SECRET``,
read by the askpass and ssh wrappers), compared in constant time. A process of another workspace can connect, but
is refused. We chose this over checking the caller's peer credentials (SO_PEERCRED) for descent from the agent:
the secret works wherever unix sockets do, and a descent check breaks on what daemonises (a dev server or tmux
started with nohup and setsid is re-parented away from the agent) and races with pid reuse. Its limit: a process
that can read the environment of this workspace's processes (/proc/<pid>/environ: the same OS user with nothing
between them, no Landlock domain, namespace or container) can read the secret too; README "Workspaces that share
an OS user or a network" says so.

One socket, one agent: the agent holds an exclusive lock (``git.sock.lock``) while it serves, and refuses to take
over a socket that another live agent holds or that still answers; only a stale one is removed.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import os
import secrets
import socket
import sys
from pathlib import Path
from typing import Any

from agent import git
from agent.api import AgentAPI, AgentAPIError, ServerUnavailable
from protocol.codec import Message

if sys.platform != "win32":
    import fcntl

log = logging.getLogger(__name__)
MAX_REQUEST_BYTES = 8192
SECRET_BYTES = 32
PROBE_TIMEOUT = 2.0
REFUSED = "this socket serves only the processes of its own workspace (SLIPWAY_AGENT_GIT_SECRET is missing or wrong)"


class SocketTaken(OSError):
    """Another live agent serves this socket: taking it over would answer that workspace's git with this
    workspace's owner's tokens."""


def _lock_path(socket_path: Path) -> Path:
    return socket_path.with_name(socket_path.name + ".lock")


def _hold_lock(path: Path) -> int:
    """An exclusive lock on ``path`` for as long as the returned descriptor stays open (the kernel drops it when
    the process ends, so a crashed agent leaves no stale lock)."""
    if sys.platform == "win32":
        raise OSError("the git helper needs unix sockets, which this platform's agent does not serve")
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(descriptor)
        raise SocketTaken(f"another agent holds {path}") from None
    except BaseException:
        os.close(descriptor)
        raise
    return descriptor


def _answers(socket_path: Path) -> bool:
    """Whether something still listens on ``socket_path`` (an agent that holds no lock, say an older one)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(PROBE_TIMEOUT)
        try:
            probe.connect(str(socket_path))
        except TimeoutError:  # a listener too busy to accept is still a listener
            return True
        except (FileNotFoundError, ConnectionRefusedError):
            return False
        except OSError:  # not a socket at all: nothing listens there
            return False
    return True


class GitHelperServer:
    def __init__(self, api: AgentAPI, socket_path: Path) -> None:
        self._api = api
        self.socket_path = socket_path
        self.secret = secrets.token_urlsafe(SECRET_BYTES)
        self._server: asyncio.AbstractServer | None = None
        self._lock: int | None = None

    @property
    def access(self) -> git.HelperAccess | None:
        """What the agent's children need to use the helper; None while it does not serve."""
        return git.HelperAccess(self.socket_path, self.secret) if self._server is not None else None

    async def start(self) -> None:
        """Serve on the socket, or raise :class:`SocketTaken` (or another OSError) and serve nothing."""
        self._lock = _hold_lock(_lock_path(self.socket_path))
        try:
            if _answers(self.socket_path):
                raise SocketTaken(f"another agent serves {self.socket_path}")
            with contextlib.suppress(FileNotFoundError):
                self.socket_path.unlink()  # stale: its agent is gone
            # Created private: nobody but the workspace's user may connect at all.
            old_umask = os.umask(0o177)
            try:
                self._server = await asyncio.start_unix_server(self._serve, path=str(self.socket_path))
            finally:
                os.umask(old_umask)
            os.chmod(self.socket_path, 0o600)
        except BaseException:
            self._release_lock()
            raise
        log.info("git helper listening on %s", self.socket_path)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
            with contextlib.suppress(FileNotFoundError):
                self.socket_path.unlink()
        self._release_lock()

    def _release_lock(self) -> None:
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            line = await reader.readline()
            reply = await self._answer(line[:MAX_REQUEST_BYTES])
            writer.write(json.dumps(reply).encode() + b"\n")
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    def _from_this_workspace(self, request: dict[str, Any]) -> bool:
        shown = request.get("secret")
        # surrogatepass: JSON may spell a lone surrogate, which is simply not the secret.
        if not isinstance(shown, str):
            return False
        return hmac.compare_digest(shown.encode("utf-8", "surrogatepass"), self.secret.encode())

    async def _answer(self, line: bytes) -> dict[str, Any]:
        try:
            request = json.loads(line)
            if not isinstance(request, dict):
                raise ValueError("not an object")
        except ValueError:
            return {"error": "the request is not a JSON object", "status": 400}
        if not self._from_this_workspace(request):
            log.warning("refused a git helper request without this agent's secret (another workspace's process?)")
            return {"error": REFUSED, "status": 403}
        try:
            result: Message
            if request.get("op") == "external-auth":
                result = await self._api.get_external_auth(
                    match=str(request.get("match") or ""),
                    provider_id=str(request.get("id") or ""),
                    listen=bool(request.get("listen")),
                )
            elif request.get("op") == "gitsshkey":
                result = await self._api.get_git_ssh_key()
            else:
                return {"error": f"unknown op {request.get('op')!r}", "status": 400}
        except AgentAPIError as exc:
            return {"error": exc.message, "status": exc.status}
        except ServerUnavailable as exc:
            return {"error": str(exc), "status": 503}
        return {"ok": result.to_json()}
