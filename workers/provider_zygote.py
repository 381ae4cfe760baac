"""The daemon's side of the provider zygote (`workers/coder_provider/zygote.py`): start it, check it answers
before each job, restart it when it died or hangs, stop it with the daemon.

What it gives a job is only the socket's path, for Terraform's environment; the plugin launcher falls back to
serving the provider itself whenever the zygote cannot serve it (`workers/provider_launch.py`), so nothing here
can fail a build. Stdlib only: the daemon never imports the provider.
"""

from __future__ import annotations

import logging
import os
import select
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping
from pathlib import Path

from workers.terraform.process import BUILD_NICENESS

log = logging.getLogger(__name__)

_PROJECT_ROOT = Path(__file__).resolve().parent.parent
# How long a zygote that is up may take to answer before it counts as hung and is replaced.
ANSWER_TIMEOUT = 5.0
_STOP_TIMEOUT = 5.0
# Neither the daemon's own settings and credentials nor Coder's variables reach the zygote (and so no child).
_STRIPPED_PREFIXES = ("SLIPWAY_", "CODER_")


# A unix socket's path must fit in sun_path (108 bytes on Linux), with room for the zygote's "z.new".
_SOCKET_PATH_LIMIT = 100


def _socket_directory() -> Path | None:
    """A fresh private directory for the socket: in the temp dir (a built-in daemon's is its cache dir's, where its
    sandbox lets it write), else in /tmp when that path is too long for a socket."""
    for parent in dict.fromkeys((tempfile.gettempdir(), "/tmp")):  # noqa: S108 - a private mkdtemp inside
        if len(parent) + len("/pz________/z.new") > _SOCKET_PATH_LIMIT:
            continue
        try:
            return Path(tempfile.mkdtemp(prefix="pz", dir=parent))
        except OSError:
            continue  # not writable here (a sandbox's /tmp): the next, or none
    log.warning("no directory for the provider zygote's socket: Terraform starts the coder provider each time")
    return None


class ProviderZygote:
    """One warm provider process for one daemon; `socket_for_job()` before each job, `stop()` at the end."""

    def __init__(
        self, home: Path, *, host_env: Mapping[str, str] | None = None, answer_timeout: float = ANSWER_TIMEOUT
    ) -> None:
        self.home = home
        self.answer_timeout = answer_timeout
        self._host_env = dict(os.environ if host_env is None else host_env)
        self._directory = _socket_directory()
        # None: no directory where a socket path fits; every launcher then serves the provider itself.
        self.socket = self._directory / "z" if self._directory is not None else None
        self._process: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()
        self.restarts = 0

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def start(self) -> None:
        """Start the zygote without waiting for it: until it listens, launchers serve the provider themselves."""
        with self._lock:
            self._start()

    def _start(self) -> None:
        if self.socket is None:
            return
        # A killed zygote leaves its socket: gone now, launchers serve themselves until the new one listens.
        self.socket.unlink(missing_ok=True)
        env = {key: value for key, value in self._host_env.items() if not key.upper().startswith(_STRIPPED_PREFIXES)}
        env["HOME"] = str(self.home)  # where `tf` caches its certificate: the launchers' HOME too
        self.home.mkdir(parents=True, exist_ok=True)
        bootstrap = (
            f"import sys; sys.path.insert(0, {str(_PROJECT_ROOT)!r}); "
            "from workers.coder_provider.zygote import main; main()"
        )
        self._process = subprocess.Popen(  # noqa: S603 - our interpreter, our module
            [sys.executable, "-I", "-c", bootstrap, str(self.socket)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            # Out of the daemon's process group: a terminal's Ctrl-C is the daemon's; the stdin pipe ends it.
            start_new_session=True,
        )
        try:
            # Its children serve builds: below the control plane, as Terraform and what it starts are.
            os.setpriority(os.PRIO_PROCESS, self._process.pid, BUILD_NICENESS)
        except OSError:
            pass  # it already exited, or the platform does not allow it: priority is a nicety

    def socket_for_job(self) -> Path | None:
        """The socket for this job's Terraform, after making sure a zygote is running and answering."""
        if self.socket is None:
            return None
        with self._lock:
            process = self._process
            if process is None or process.poll() is not None:
                if process is not None:
                    log.warning("the provider zygote exited (status %s): starting another", process.returncode)
                    self._close_pipes(process)
                    self.restarts += 1
                self._start()
            elif self.socket.exists() and self._ask(process) is None:
                log.warning("the provider zygote did not answer within %gs: replacing it", self.answer_timeout)
                self.restarts += 1
                self._kill(process)
                self._start()
            return self.socket

    def children_forked(self) -> int | None:
        """How many providers the running zygote has forked (None: not running, or not answering)."""
        with self._lock:
            process = self._process
            return self._ask(process) if process is not None and process.poll() is None else None

    def _ask(self, process: subprocess.Popen[bytes]) -> int | None:
        """The zygote answers a byte on its stdin with its count of children, on its stdout; only once it listens
        (hence the callers' check for the socket: a zygote still importing is not hung)."""
        assert process.stdin is not None and process.stdout is not None  # noqa: S101 - both are pipes
        try:
            process.stdin.write(b"?")
            process.stdin.flush()
            ready, _, _ = select.select([process.stdout], [], [], self.answer_timeout)
            answer = os.read(process.stdout.fileno(), 64) if ready else b""
            return int(answer) if answer.endswith(b"\n") else None
        except (OSError, ValueError):
            return None

    @staticmethod
    def _kill(process: subprocess.Popen[bytes]) -> None:
        process.kill()
        process.wait()
        ProviderZygote._close_pipes(process)

    @staticmethod
    def _close_pipes(process: subprocess.Popen[bytes]) -> None:
        for pipe in (process.stdin, process.stdout):
            if pipe is not None:
                try:
                    pipe.close()
                except OSError:
                    pass  # a broken pipe to a zygote that is gone

    def stop(self) -> None:
        """Stop the zygote (its children serve running Terraforms and end with them) and remove its socket."""
        with self._lock:
            process, self._process = self._process, None
            if process is not None:
                self._close_pipes(process)  # end of file on its stdin: it exits
                try:
                    process.wait(timeout=_STOP_TIMEOUT)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
            if self._directory is not None:
                shutil.rmtree(self._directory, ignore_errors=True)
