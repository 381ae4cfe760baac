"""The agent's runtime directory: its own log, the scripts' logs and bin directory, the Git helper's socket.

Each agent has its own, created 0700. Without ``SLIPWAY_AGENT_LOG_DIR`` it is ``slipway-agent-<digest>`` in the
temp dir, the digest taken from the agent's token: the temp dir is shared by every workspace a provisioner daemon
starts (as the same OS user, with the daemon's ``TMPDIR``), so the temp dir itself would put every agent's Git
helper on one socket and hand one person's `git` another person's tokens (issue 34, H0).
"""

from __future__ import annotations

import hashlib
import os
import stat
import sys
import tempfile
from pathlib import Path

DIGEST_CHARS = 16  # 64 bits: no two agents' directories meet, and the token cannot be told from its name


class RuntimeDirError(OSError):
    """The directory cannot be the agent's own; the message says why, for the operator."""


def default_runtime_dir(token: str) -> Path:
    digest = hashlib.sha256(token.encode()).hexdigest()[:DIGEST_CHARS]
    return Path(tempfile.gettempdir()) / f"slipway-agent-{digest}"


def make_private_dir(path: Path) -> None:
    """``path`` created 0700 (missing parents as usual). One that exists already, in a directory others may write
    to, must be a real directory of this user: one that another user made, or a link, is refused (it would be
    theirs to read or to redirect); one of ours left group- or world-accessible is made private again."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        path.mkdir(mode=0o700)
        return
    except FileExistsError:
        pass
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode):
        raise RuntimeDirError(f"{path} exists and is not a directory (a link or a file): it cannot be the agent's")
    if sys.platform == "win32":  # a user's temp dir there is their own, and modes mean little
        return
    if info.st_uid != os.getuid():
        raise RuntimeDirError(f"{path} belongs to another user (uid {info.st_uid}): it cannot be the agent's")
    if stat.S_IMODE(info.st_mode) & 0o077:
        os.chmod(path, 0o700)


def make_log_dir(path: Path, *, default: bool) -> None:
    """The default directory (in the shared temp dir) is made private, or refused; a directory the operator chose
    is created 0700 when missing and otherwise used as it is (it may be a shared one such as /tmp, which is not
    the agent's to change)."""
    if default:
        make_private_dir(path)
    else:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
