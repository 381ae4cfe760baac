"""Child-process plumbing shared by everything `slipway server` starts."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import pwd
import signal
import subprocess
import time
from collections.abc import Sequence

PR_SET_PDEATHSIG = 1
# The signals the supervisor stops its children with.
STOP_SIGNALS = frozenset({signal.SIGINT, signal.SIGTERM})


def _prepare_child(hold: frozenset[signal.Signals], niceness: int) -> None:
    """Runs in the child between fork and exec.

    The parent blocked the stop signals around the fork (see spawn): one sent to the child before exec would
    otherwise reach the handler the child inherited from the supervisor, which only sets a flag in memory that exec
    wipes, and the signal is lost. The server then waited its full grace for a daemon that never heard it (30 s
    when Ctrl-C came just as the daemons started). Here the handlers go back to the default first, so a signal
    already pending ends the child as it is unblocked; those in `hold` stay blocked through exec, pending, until
    the program unblocks them itself once it can handle them quietly."""
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    # If the supervisor is killed outright, the kernel stops the child too.
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    for signum in STOP_SIGNALS:
        signal.signal(signum, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS - hold)
    if niceness:
        os.nice(niceness)


def spawn(
    argv: Sequence[str],
    *,
    env: dict[str, str] | None = None,
    pass_fds: Sequence[int] = (),
    stdin_data: bytes | None = None,
    user: pwd.struct_passwd | None = None,
    cwd: str | os.PathLike[str] | None = None,
    umask: int = -1,
    hold_sigint: bool = False,
    niceness: int = 0,
) -> subprocess.Popen[bytes]:
    """Start a child in a session of its own; `stdin_data` is written to its stdin, which is then closed;
    `user` runs it as that account (uid, primary and supplementary groups), which needs root; `hold_sigint` starts
    it with SIGINT blocked, for a program that unblocks it once it is ready for it (the built-in daemons,
    workers/__main__.py): a Ctrl-C that comes while it starts then waits for it instead of interrupting its imports
    with a traceback. `niceness` lowers its CPU priority (background work that must not slow what people wait
    for)."""
    # A session of its own keeps the terminal's Ctrl-C away from children: the supervisor decides the order
    # in which things stop (web first, Redis last), instead of everything dying at once.
    hold = frozenset({signal.SIGINT}) if hold_sigint else frozenset()
    # Blocked in this thread (the one that forks) until the child exists: see _prepare_child.
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        process = _popen(argv, env, pass_fds, stdin_data, user, cwd, umask, hold, niceness)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
    if stdin_data is not None and process.stdin is not None:
        with process.stdin:
            process.stdin.write(stdin_data)
    return process


def _popen(
    argv: Sequence[str],
    env: dict[str, str] | None,
    pass_fds: Sequence[int],
    stdin_data: bytes | None,
    user: pwd.struct_passwd | None,
    cwd: str | os.PathLike[str] | None,
    umask: int,
    hold: frozenset[signal.Signals],
    niceness: int,
) -> subprocess.Popen[bytes]:
    return subprocess.Popen(  # noqa: S603 - argv is built by us, never from user input
        list(argv),
        env=env,
        pass_fds=tuple(pass_fds),
        stdin=subprocess.PIPE if stdin_data is not None else None,
        start_new_session=True,
        cwd=cwd,
        umask=umask,
        # After the switch of user (which clears a parent-death signal), so it holds for the new user too.
        preexec_fn=lambda: _prepare_child(hold, niceness),  # before threads start; only signal calls
        user=None if user is None else user.pw_uid,
        group=None if user is None else user.pw_gid,
        extra_groups=None if user is None else os.getgrouplist(user.pw_name, user.pw_gid),
    )


def interrupt(processes: Sequence[subprocess.Popen[bytes]], *, grace: float, force_grace: float) -> None:
    """SIGINT each process and wait up to ``grace`` seconds in total; then SIGINT those still running again and wait
    up to ``force_grace`` more. (A daemon cancels its job on the first, Terraform keeping its state, and kills its
    Terraform with everything Terraform started on the second.)"""
    for process in processes:
        _signal(process, signal.SIGINT)
    if _wait_all(processes, grace):
        return
    for process in processes:
        _signal(process, signal.SIGINT)
    _wait_all(processes, force_grace)


def _wait_all(processes: Sequence[subprocess.Popen[bytes]], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    for process in processes:
        try:
            process.wait(timeout=max(deadline - time.monotonic(), 0.0))
        except subprocess.TimeoutExpired:
            return False
    return True


def _signal(process: subprocess.Popen[bytes], signum: int) -> None:
    if process.poll() is None:
        try:
            os.kill(process.pid, signum)
        except ProcessLookupError:
            pass


def stop(processes: Sequence[subprocess.Popen[bytes]], *, grace: float) -> None:
    """SIGTERM every process, wait up to ``grace`` seconds in total, then SIGKILL what is left."""
    for process in processes:
        if process.poll() is None:
            _signal_group(process, signal.SIGTERM)
    deadline = time.monotonic() + grace
    for process in processes:
        remaining = max(deadline - time.monotonic(), 0.0)
        try:
            process.wait(timeout=remaining)
        except subprocess.TimeoutExpired:
            _signal_group(process, signal.SIGKILL)
            process.wait()


def _signal_group(process: subprocess.Popen[bytes], signum: int) -> None:
    # The child leads its own session, so signalling the group also reaches its children (gunicorn workers).
    try:
        os.killpg(process.pid, signum)
    except ProcessLookupError:
        pass
