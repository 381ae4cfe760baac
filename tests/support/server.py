"""Run the real `slipway server` as a subprocess on a free port with its own data dir."""

from __future__ import annotations

import contextlib
import os
import pwd
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType
from urllib.parse import quote

import psutil

from tests.support.daemon_user import fresh_cache_dir, let_through, prepare_daemon_user
from tests.support.net import free_port, wait_for_http

SLIPWAY = str(Path(sys.executable).with_name("slipway"))


class ServerProcess:
    """`user`: run the server as that user rather than as the test's own. `bind_address`: the one address it
    listens on (an address of this host, e.g. its end of a link to a network namespace)."""

    def __init__(
        self,
        data_dir: Path,
        *extra_args: str,
        env: dict[str, str] | None = None,
        user: str | None = None,
        start_timeout: float = 90.0,
        bind_address: str = "127.0.0.1",
    ) -> None:
        self.start_timeout = start_timeout  # for `with`: a machine shared with other test runs can be slow
        self.bind_address = bind_address
        self.data_dir = data_dir
        self.extra_args = extra_args
        self._take_port(free_port())
        self.env = {key: value for key, value in os.environ.items() if not key.startswith("SLIPWAY_")}
        # Outside pytest's 0700 tmp dirs (the daemons may run as another user), and never in the data dir.
        self.env["SLIPWAY_PROVISIONER_CACHE_DIR"] = str(fresh_cache_dir())
        self.env.update(env or {})
        self.user = None if user is None else pwd.getpwnam(user)
        self.process: subprocess.Popen[bytes] | None = None
        self.descendants: list[psutil.Process] = []

    @property
    def redis_url(self) -> str:
        """The server's embedded Redis, with the password it keeps in its data dir."""
        password = (self.data_dir / "redis_password").read_text().strip()
        return f"unix://:{quote(password, safe='')}@{self.data_dir / 'redis.sock'}"

    def _take_port(self, port: int) -> None:
        self.port = port
        self.url = f"http://{self.bind_address}:{port}"
        self.log_path = self.data_dir.parent / f"server-{port}.log"
        address = f"{self.bind_address}:{port}"
        self.args = ["server", "--address", address, "--data-dir", str(self.data_dir), *self.extra_args]

    def start(self, timeout: float = 90.0) -> ServerProcess:
        prepare_daemon_user()
        account = self.user
        if account is not None:
            let_through(account.pw_name)
        # A port free when it was chosen can be bound by someone else before the server binds it (another test run
        # on the machine): the server then says so in one line and exits, and it starts again on another port.
        for _ in range(3):
            self._spawn(account)
            if self._serving(timeout):
                break
            if "address already in use" not in self.log():
                self.stop()
                raise AssertionError(f"server did not start:\n{self.log()}") from None
            self._take_port(free_port())
        else:
            raise AssertionError(f"server found no free port:\n{self.log()}")
        assert self.process is not None
        self.descendants = psutil.Process(self.process.pid).children(recursive=True)
        return self

    def _serving(self, timeout: float) -> bool:
        """Whether /healthz answered 200 (False: the server exited first)."""
        assert self.process is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                wait_for_http(f"{self.url}/healthz", timeout=1)
                return True
            except TimeoutError:
                if self.process.poll() is not None:
                    return False
        self.stop()
        raise AssertionError(f"server did not start within {timeout:.0f} s:\n{self.log()}")

    def _spawn(self, account: pwd.struct_passwd | None) -> None:
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                [SLIPWAY, *self.args],
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                user=None if account is None else account.pw_uid,
                group=None if account is None else account.pw_gid,
                extra_groups=None if account is None else [],
            )

    def stop(self, signum: int = signal.SIGINT, timeout: float = 30.0) -> int:
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(signum)
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            report = self.hang_report()
            for process in [*self.tree(), psutil.Process(self.process.pid)]:
                with contextlib.suppress(psutil.Error):
                    process.kill()
            self.process.wait()
            raise AssertionError(f"slipway server did not stop within {timeout:.0f} s\n{report}") from None

    def tree(self) -> list[psutil.Process]:
        try:
            return list(psutil.Process(self.process.pid).children(recursive=True)) if self.process else []
        except psutil.NoSuchProcess:
            return []

    def hang_report(self) -> str:
        """What each process of the server is doing (state and kernel wait channel), and the log's last lines."""
        assert self.process is not None
        lines = []
        for process in [psutil.Process(self.process.pid), *self.tree()]:
            with contextlib.suppress(psutil.Error, OSError):
                wchan = Path(f"/proc/{process.pid}/wchan").read_text() if Path("/proc").exists() else "?"
                lines.append(f"  {process.pid} {process.status()} wchan={wchan} {' '.join(process.cmdline())[:160]}")
        return "\n".join(["processes:", *lines, "log:", *self.log().splitlines()[-20:]])

    def survivors(self) -> list[psutil.Process]:
        return [child for child in self.descendants if child.is_running() and child.status() != psutil.STATUS_ZOMBIE]

    def log(self) -> str:
        return self.log_path.read_text()

    def __enter__(self) -> ServerProcess:
        return self.start(self.start_timeout)

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        if self.process is not None and self.process.poll() is None:
            self.stop()
        for child in self.survivors():
            child.kill()


def run_server_once(*args: str) -> subprocess.CompletedProcess[str]:
    """`slipway server ARGS` to its end, for settings and setups it refuses with one line."""
    # Built-in daemons are planned before the database is reached: their cache dir goes with the tests' files.
    prepare_daemon_user()
    env = {**os.environ, "SLIPWAY_PROVISIONER_CACHE_DIR": str(fresh_cache_dir())}
    return subprocess.run([SLIPWAY, "server", *args], capture_output=True, text=True, timeout=60, env=env, check=False)
