"""The agent's Git helper socket: how ``git`` in the workspace gets the owner's tokens without holding the agent's
own token (which nothing the agent starts inherits).

A unix socket, mode 0600, in the agent's log directory: only the workspace's user can connect. Each connection
sends one JSON line and gets one back:

  {"op": "external-auth", "match": "<remote url>", "id": "<provider id>", "listen": bool}
      -> {"ok": <ExternalAuthReply>} | {"error": "<message>", "status": <http status>}
  {"op": "gitsshkey"} -> {"ok": <GitSSHKeyReply>} | {"error": …}
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from pathlib import Path
from typing import Any

from agent.api import AgentAPI, AgentAPIError, ServerUnavailable
from protocol.codec import Message

log = logging.getLogger(__name__)
MAX_REQUEST_BYTES = 8192


class GitHelperServer:
    def __init__(self, api: AgentAPI, socket_path: Path) -> None:
        self._api = api
        self.socket_path = socket_path
        self._server: asyncio.AbstractServer | None = None

    async def start(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()
        # Created private: nobody but the workspace's user may ask for its owner's tokens.
        old_umask = os.umask(0o177)
        try:
            self._server = await asyncio.start_unix_server(self._serve, path=str(self.socket_path))
        finally:
            os.umask(old_umask)
        os.chmod(self.socket_path, 0o600)
        log.info("git helper listening on %s", self.socket_path)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()

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

    async def _answer(self, line: bytes) -> dict[str, Any]:
        try:
            request = json.loads(line)
            if not isinstance(request, dict):
                raise ValueError("not an object")
        except ValueError:
            return {"error": "the request is not a JSON object", "status": 400}
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
