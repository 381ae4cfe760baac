"""The agent's SSH service, loaded when it is first needed rather than when the agent starts.

asyncssh and the cryptography it pulls in are a third of the agent's imports (about 0.5 s of CPU on a busy
machine), and nothing before "ready" uses them: a workspace's agent would make its owner wait for an SSH server
nobody has asked for yet. The agent warms it in the background once the workspace is ready, so that the first
``ssh`` does not pay for the import either; a dial before then loads it itself, off the event loop.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from typing import TYPE_CHECKING

from agent.processes import ProcessGroups

if TYPE_CHECKING:
    from agent.sshd import SessionContextSource
    from agent.sshd import SSHService as LoadedSSHService


class SSHService:
    """:class:`agent.sshd.SSHService`, imported and made (host key and all) on first use."""

    def __init__(self, context: SessionContextSource, leftovers: ProcessGroups | None = None) -> None:
        self._context = context
        # Sessions' process groups: what users leave running (nohup … &) is stopped when the agent shuts down.
        self.leftovers = leftovers or ProcessGroups()
        self._service: LoadedSSHService | None = None
        # The warm-up (a worker thread) and a dial (another) may both ask first: one of them makes it.
        self._loading = threading.Lock()

    def _load(self) -> LoadedSSHService:
        with self._loading:
            if self._service is None:
                from agent import sshd  # the deferred import this module exists for

                self._service = sshd.SSHService(self._context, self.leftovers)
            return self._service

    async def warm(self) -> None:
        """Import and make the service in a worker thread, so that the first dial finds it ready."""
        await asyncio.to_thread(self._load)

    async def serve(self, sock: socket.socket) -> None:
        """Run one SSH connection over ``sock`` (already connected) until it closes."""
        service = self._service if self._service is not None else await asyncio.to_thread(self._load)
        await service.serve(sock)

    async def close_all(self, timeout: float) -> None:
        """Close every connection; sessions hang up their processes. Nothing to close if none was ever served."""
        if self._service is not None:
            await self._service.close_all(timeout)
