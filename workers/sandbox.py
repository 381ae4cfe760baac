"""Confining a provisioner daemon (and every template it runs) with Linux Landlock, so that Terraform, its
providers and a template's `local-exec` cannot read or write the server's own data.

Landlock (Linux 5.13+) lets an unprivileged process give up file access for itself and everything it starts
afterwards. It only *allows* hierarchies, so "everything but the data dir" is built as: for each ancestor of a
protected path, allow every entry beside it, and never the ancestor itself (reaching a path needs no right on
the directories above it). The data dir's ancestors therefore keep their existing entries, but nothing new can
be created directly in them.

Two more things keep a template away from the daemon's own secrets (its pre-shared key and Redis password, in
its environment): the daemon is made non-dumpable, so a process of the same user cannot read its /proc files or
ptrace it, and Landlock itself refuses a confined process any ptrace or /proc access to the unconfined server
processes. Signals are deliberately not scoped (ABI 6 could): every daemon start is a Landlock domain of its
own, and the stop build of a workspace that is a local process (examples/local) may run on another daemon than
the one that started it, yet must be able to signal it.

Only the standard library: ctypes and the raw syscall numbers (x86-64 and arm64 share them).
"""

from __future__ import annotations

import ctypes
import os
import struct
import sys
from collections.abc import Iterable
from pathlib import Path

from protocol.sandbox import SandboxPolicy

_SYS_LANDLOCK_CREATE_RULESET = 444
_SYS_LANDLOCK_ADD_RULE = 445
_SYS_LANDLOCK_RESTRICT_SELF = 446
_LANDLOCK_CREATE_RULESET_VERSION = 1
_LANDLOCK_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_DUMPABLE = 4

EXECUTE = 1 << 0
WRITE_FILE = 1 << 1
READ_FILE = 1 << 2
READ_DIR = 1 << 3
_MAKE_AND_REMOVE = sum(1 << bit for bit in range(4, 13))  # remove dir/file, make char/dir/reg/sock/fifo/block/sym
REFER = 1 << 13  # ABI 2
TRUNCATE = 1 << 14  # ABI 3
IOCTL_DEV = 1 << 15  # ABI 5
READ_ONLY = EXECUTE | READ_FILE | READ_DIR
# Rights that make sense on a file (anything else is refused by the kernel for a non-directory).
_FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV


class SandboxError(RuntimeError):
    """The sandbox could not be set up; the message says why, for the operator."""


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def landlock_abi() -> int:
    """The Landlock ABI version of the running kernel; 0 when there is none (not Linux, too old, disabled)."""
    if not sys.platform.startswith("linux"):
        return 0
    version = _libc().syscall(_SYS_LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0), _LANDLOCK_CREATE_RULESET_VERSION)
    return max(int(version), 0)


def _handled_rights(abi: int) -> int:
    rights = EXECUTE | WRITE_FILE | READ_FILE | READ_DIR | _MAKE_AND_REMOVE
    if abi >= 2:
        rights |= REFER
    if abi >= 3:
        rights |= TRUNCATE
    if abi >= 5:
        rights |= IOCTL_DEV
    return rights


def _ruleset_attr(handled: int) -> bytes:
    # Only the first field of struct landlock_ruleset_attr (file system rights), which every ABI accepts.
    return struct.pack("=Q", handled)


def _resolved(paths: Iterable[str]) -> set[str]:
    return {os.path.realpath(path) for path in paths}


def _ancestors(path: str) -> list[str]:
    """Proper ancestors of an absolute path, from / down."""
    result, current = [], os.path.dirname(path)
    while True:
        result.append(current)
        parent = os.path.dirname(current)
        if parent == current:
            return result[::-1]
        current = parent


def _is_within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def grants_except(root: str, rights: int, protected: set[str]) -> list[tuple[str, int]]:
    """(path, rights) rules that give `rights` on everything under `root` except the `protected` paths.

    Where `root` holds a protected path, the rule is split into one per entry beside the path to it, down to the
    protected path itself; entries that lead (through a symlink) into or above a protected path are left out.
    """
    root = os.path.realpath(root)
    if any(_is_within(root, path) for path in protected):
        return []
    above = {ancestor for path in protected for ancestor in _ancestors(path)}
    if root not in above:
        return [(root, rights)]
    rules: list[tuple[str, int]] = []
    pending = [root]
    while pending:
        directory = pending.pop()
        try:
            entries = os.listdir(directory)
        except OSError:
            continue  # unreadable: its entries stay out of reach, which errs on the safe side
        for entry in entries:
            path = os.path.join(directory, entry)
            target = os.path.realpath(path)
            if path in protected or target in protected or any(_is_within(target, p) for p in protected):
                continue
            if path in above:
                pending.append(path)
            elif target in above:
                continue  # a symlink to a directory above a protected path would open it all up again
            else:
                rules.append((path, rights))
    return rules


def running_code_paths() -> list[str]:
    """Where this process's interpreter and modules live: it imports more of them after confinement.

    The walk from / cannot see these when they lie in a directory the daemon may traverse but not list, beside
    the data dir (a server run as root from /root, with its data dir in /root/.local/share: the daemon's user
    gets only "x" on /root), so they are named here."""
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    paths.update(entry for entry in sys.path if entry and os.path.isabs(entry))
    for name in ("workers", "protocol"):  # an editable install's code may be found by a finder, not sys.path
        module = sys.modules.get(name)
        if module is not None and module.__file__:
            paths.add(os.path.dirname(os.path.dirname(module.__file__)))
    return sorted(path for path in _resolved(paths) if os.path.exists(path))


def _add_rule(libc: ctypes.CDLL, ruleset: int, path: str, rights: int, handled: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return  # gone, or a dangling link: nothing to allow
    try:
        if not os.path.isdir(f"/proc/self/fd/{fd}"):
            rights &= _FILE_RIGHTS
        attr = struct.pack("=Qi", rights & handled, fd)
        if libc.syscall(_SYS_LANDLOCK_ADD_RULE, ruleset, _LANDLOCK_RULE_PATH_BENEATH, attr, 0) != 0:
            code = ctypes.get_errno()
            raise SandboxError(f"landlock_add_rule({path}) failed: {os.strerror(code)}")
    finally:
        os.close(fd)


def confine(policy: SandboxPolicy) -> int:
    """Confine this process and its future children to `policy`; returns the Landlock ABI used.

    Raises SandboxError when Landlock is missing or refuses; the process is then unchanged.
    """
    abi = landlock_abi()
    if abi < 1:
        raise SandboxError("this kernel offers no Landlock (Linux 5.13+ with Landlock enabled is needed)")
    libc = _libc()
    handled = _handled_rights(abi)
    protected = _resolved(policy.protected)
    if policy.writable is None:
        rules = grants_except("/", handled, protected)
    else:
        rules = grants_except("/", READ_ONLY, protected)
        for root in policy.writable:
            rules += grants_except(root, handled, protected)
    for root in running_code_paths():
        rules += grants_except(root, READ_ONLY, protected)
    attr = _ruleset_attr(handled)
    ruleset = int(libc.syscall(_SYS_LANDLOCK_CREATE_RULESET, attr, ctypes.c_size_t(len(attr)), 0))
    if ruleset < 0:
        raise SandboxError(f"landlock_create_ruleset failed: {os.strerror(ctypes.get_errno())}")
    try:
        for path, rights in rules:
            _add_rule(libc, ruleset, path, rights, handled)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise SandboxError(f"prctl(PR_SET_NO_NEW_PRIVS) failed: {os.strerror(ctypes.get_errno())}")
        if libc.syscall(_SYS_LANDLOCK_RESTRICT_SELF, ruleset, 0) != 0:
            raise SandboxError(f"landlock_restrict_self failed: {os.strerror(ctypes.get_errno())}")
    finally:
        os.close(ruleset)
    return abi


def make_undumpable() -> None:
    """Processes of the same user (a template's) can then neither ptrace this one nor read its /proc files
    (environ, mem, fds); only root can. Reset by exec, so every child that needs it sets it itself."""
    if sys.platform.startswith("linux") and _libc().prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise SandboxError(f"prctl(PR_SET_DUMPABLE) failed: {os.strerror(ctypes.get_errno())}")


def protected_paths_inside(paths: Iterable[Path], protected: Iterable[str]) -> list[Path]:
    """Those of `paths` that lie in (or are) a protected path: a daemon could not use them once confined."""
    resolved = _resolved(protected)
    return [path for path in paths if any(_is_within(os.path.realpath(path), p) for p in resolved)]
