"""Child-process plumbing shared by everything `slipway server` starts."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import subprocess
import time
from collections.abc import Sequence

PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """Runs in the child before exec: if the supervisor is killed outright, the kernel stops the child too."""
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def spawn(
    argv: Sequence[str], *, env: dict[str, str] | None = None, pass_fds: Sequence[int] = ()
) -> subprocess.Popen[bytes]:
    # A session of its own keeps the terminal's Ctrl-C away from children: the supervisor decides the order
    # in which things stop (web first, Redis last), instead of everything dying at once.
    return subprocess.Popen(  # noqa: S603 - argv is built by us, never from user input
        list(argv),
        env=env,
        pass_fds=tuple(pass_fds),
        start_new_session=True,
        preexec_fn=_die_with_parent,
    )


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
