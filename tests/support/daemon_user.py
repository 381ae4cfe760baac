"""What tests need now that built-in daemons keep away from the server's data.

Run as root (as CI is), `slipway server` starts its built-in daemons as the user slipway-provisioner, which must
reach this venv's interpreter and Slipway's code (here under /root, mode 0700: the tests let it through with an
ACL, exactly the fix the server's refusal suggests) and a cache dir and workspaces outside pytest's tmp dirs
(0700 too). Run as anyone else, the daemons are confined by Landlock and cannot create anything directly in the
data dir's ancestors, so what they write to must exist before the server starts.
"""

from __future__ import annotations

import atexit
import functools
import os
import pwd
import shutil
import stat
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

AS_ROOT = os.geteuid() == 0
DAEMON_USER = "slipway-provisioner"
REPO = Path(__file__).resolve().parent.parent.parent


@functools.cache
def shared_dir() -> Path:
    """A directory outside pytest's private tmp dirs, open to other users; removed when the session ends."""
    path = Path(tempfile.mkdtemp(prefix="slipway-tests-"))
    path.chmod(0o755)
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


def let_through(user: str) -> None:
    """Let `user` traverse every directory that keeps it from this venv and Slipway's code (ACL u:user:x)."""
    targets = [Path(sys.executable), Path(sys.prefix), Path(os.__file__).parent, REPO]
    directories: dict[Path, None] = {}
    for target in targets:
        for path in (target.absolute(), target.resolve()):
            directories.update(dict.fromkeys(reversed(path.parents)))
    for directory in directories:
        if not directory.stat().st_mode & stat.S_IXOTH:
            subprocess.run(["setfacl", "-m", f"u:{user}:x", str(directory)], check=True)


@functools.cache
def prepare_daemon_user() -> None:
    """As root: the user the server will run its daemons as exists and can reach Slipway."""
    if not AS_ROOT:
        return
    from app.server.builtin_daemons import provisioner_account

    provisioner_account("", echo=lambda line: None)
    let_through(DAEMON_USER)


def fresh_cache_dir() -> Path:
    """A cache dir path for one server's daemons (the server creates it, owned by the daemons' user)."""
    return shared_dir() / f"cache-{uuid.uuid4().hex[:12]}"


def daemon_writable_dir(name: str, user: str | None = None) -> Path:
    """A new directory the daemons' user (`user`, else the one this server runs daemons as) may create
    workspaces in, existing before any server starts."""
    path = shared_dir() / f"{name}-{uuid.uuid4().hex[:8]}"
    path.mkdir(mode=0o755)
    owner = user or (DAEMON_USER if AS_ROOT else None)
    if owner is not None:
        prepare_daemon_user()
        account = pwd.getpwnam(owner)
        os.chown(path, account.pw_uid, account.pw_gid)
    return path
