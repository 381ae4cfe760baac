"""A daemon's identity: a random id kept in its cache dir, so that it is the same daemon after a restart and a
different one on every other host or cache dir, whatever the names (two hosts both called "builder", every
server replica's "builtin-1"). The name is only a label."""

from __future__ import annotations

import fcntl
import logging
import os
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import IO

log = logging.getLogger(__name__)


@dataclass
class DaemonIdentity:
    id: str
    # Held (locked) while the daemon runs: a second daemon of the same name and cache dir must not share the id.
    lock: IO[str] | None

    def release(self) -> None:
        if self.lock is not None:
            self.lock.close()
            self.lock = None


def claim_identity(cache_dir: Path, name: str) -> DaemonIdentity:
    """The id kept in ``cache_dir`` for daemons called ``name``, created on first use. If another running daemon
    holds it, this one gets a fresh id for this run only (and says so): the two must never fail each other's jobs
    by registering as one."""
    directory = cache_dir / "identity"
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    # Left open on success: the lock lasts as long as the daemon.
    handle = open(os.open(directory / name, os.O_RDWR | os.O_CREAT, 0o600), "r+", encoding="ascii")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        fresh = str(uuid.uuid4())
        log.warning(
            "another daemon named %s runs with the cache dir %s: this one registers as a new daemon (%s) for this "
            "run; give each daemon its own --name or cache dir to keep its identity across restarts",
            name, cache_dir, fresh,
        )  # fmt: skip
        return DaemonIdentity(fresh, None)
    kept = handle.read().strip()
    try:
        identity = str(uuid.UUID(kept))
    except ValueError:  # first run (or a damaged file): a new identity
        identity = str(uuid.uuid4())
        handle.seek(0)
        handle.truncate()
        handle.write(identity + "\n")
        handle.flush()
        os.fsync(handle.fileno())
    return DaemonIdentity(identity, handle)
