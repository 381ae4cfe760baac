"""The workspace's listening TCP ports, read from /proc/net/tcp and tcp6, reported when they change.

The dashboard lists them with a link to open each (a port URL, or a path); Coder's agent reports the same. The
process behind a port is found through the socket's inode among /proc/<pid>/fd, for the processes this user may
read (others' ports are listed without a name).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Awaitable, Callable
from pathlib import Path

from agent.api import AgentAPIError, ServerUnavailable
from protocol.agentapi import MAX_LISTENING_PORTS, ListeningPort

log = logging.getLogger(__name__)

PROC = Path("/proc")
LISTEN_STATE = "0A"
# Coder's minimum: ports below it are not offered (they are rarely web servers and need root anyway).
MINIMUM_PORT = 9
SCAN_INTERVAL = 2.0
# Sent again this often even when nothing changed: the server forgets a list it has not heard of in 3 times this.
REFRESH_INTERVAL = 60.0

PostPorts = Callable[[list[ListeningPort]], Awaitable[None]]


def listening_ports(proc: Path = PROC) -> list[ListeningPort]:
    """The listening TCP ports, each once (IPv4 and IPv6 alike), in port order."""
    inodes: dict[int, str] = {}
    for table in ("tcp", "tcp6"):
        with contextlib.suppress(OSError):
            for port, inode in _listening(proc / "net" / table):
                inodes.setdefault(port, inode)
    names = _process_names(proc, set(inodes.values())) if inodes else {}
    ports = [
        ListeningPort(process_name=names.get(inode, ""), port=port)
        for port, inode in sorted(inodes.items())
        if port >= MINIMUM_PORT
    ]
    return ports[:MAX_LISTENING_PORTS]


def _listening(table: Path) -> list[tuple[int, str]]:
    """(port, socket inode) of the table's sockets in LISTEN state."""
    found = []
    for line in table.read_text().splitlines()[1:]:
        fields = line.split()
        if len(fields) < 10 or fields[3] != LISTEN_STATE:
            continue
        _, _, port = fields[1].rpartition(":")
        try:
            found.append((int(port, 16), fields[9]))
        except ValueError:
            continue
    return found


def _process_names(proc: Path, inodes: set[str]) -> dict[str, str]:
    wanted = {f"socket:[{inode}]": inode for inode in inodes}
    names: dict[str, str] = {}
    for entry in proc.iterdir():
        if not entry.name.isdecimal():
            continue
        try:
            for fd in (entry / "fd").iterdir():
                inode = wanted.get(os.readlink(fd))
                if inode is not None and inode not in names:
                    names[inode] = (entry / "comm").read_text().strip()
        except OSError:  # another user's process, or one that just ended
            continue
        if len(names) == len(wanted):
            break
    return names


class PortReporter:
    """Scan every :data:`SCAN_INTERVAL`; post the list when it changes, and every :data:`REFRESH_INTERVAL`."""

    def __init__(self, post: PostPorts, *, scan: Callable[[], list[ListeningPort]] = listening_ports) -> None:
        self._post = post
        self._scan = scan

    async def run(self) -> None:
        sent: list[ListeningPort] | None = None
        loop = asyncio.get_running_loop()
        sent_at = 0.0
        while True:
            ports = await asyncio.to_thread(self._scan)
            if ports != sent or loop.time() - sent_at >= REFRESH_INTERVAL:
                try:
                    await self._post(ports)
                except ServerUnavailable as exc:
                    log.debug("listening ports not sent (%s); retrying", exc.problem)
                except AgentAPIError as exc:
                    log.warning("the server refused the listening ports: %s", exc)
                    sent, sent_at = ports, loop.time()
                else:
                    sent, sent_at = ports, loop.time()
            await asyncio.sleep(SCAN_INTERVAL)
