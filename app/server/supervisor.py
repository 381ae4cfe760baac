"""`slipway server`: check the settings, start Redis, migrate, then run and watch the web server.

Everything it starts is stopped when it gets SIGINT or SIGTERM (or dies: children carry a parent-death
signal), so one Ctrl-C leaves no process behind.
"""

from __future__ import annotations

import contextlib
import errno
import http.client
import logging
import os
import secrets
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from app.core.config import Settings, draining_marker, ensure_secret_key
from app.server.embedded_redis import (
    EmbeddedRedisError,
    embedded_redis_password,
    embedded_redis_url,
    launch_embedded_redis,
    wait_for_embedded_redis,
)
from app.server.processes import interrupt, spawn, stop
from app.server.start_gate import OPEN, START_GATE_FD_ENV

if TYPE_CHECKING:
    from app.server.builtin_daemons import DaemonLaunch

# What starting needs after the web server was spawned (Redis's client, SQLAlchemy, the daemons' planning) is
# imported where it is used: the web server, which loads the whole application, starts that much sooner
# (app/server/web.py).

log = logging.getLogger("slipway.server")
SHUTDOWN_GRACE_SECONDS = 10.0
# On the way out, built-in daemons cancel their builds while the web server still takes the builds' last lines and
# outcome: Terraform is interrupted (its state kept) and gets this long before it is killed with all it started.
BUILD_CANCEL_GRACE_SECONDS = 30.0
BUILD_KILL_GRACE_SECONDS = 5.0


class StartupError(RuntimeError):
    """A reason the server cannot start, phrased for the operator (printed as one line)."""


class _StoppedWhileStarting(Exception):
    """SIGINT or SIGTERM came while the server started: what was started is stopped, and the server exits 0."""


MAINTENANCE_INTERVAL_SECONDS = 10.0
NOTIFIER_NICENESS = 10
# The PostgreSQL advisory lock replicas take around their migrations (any fixed number; "slipway" in ASCII).
MIGRATION_LOCK_KEY = 0x736C6970776179
# A built-in daemon that keeps dying is restarted at most this often, so a broken setup does not spin.
DAEMON_RESTART_BACKOFF_SECONDS = (1.0, 30.0)


@dataclass
class BuiltinDaemon:
    name: str
    process: subprocess.Popen[bytes] | None = None
    restarts: int = 0
    next_start: float = 0.0


@dataclass
class Supervisor:
    settings: Settings
    echo: Callable[[str], None] = print
    children: list[subprocess.Popen[bytes]] = field(default_factory=list)
    daemons: list[BuiltinDaemon] = field(default_factory=list)
    redis_process: subprocess.Popen[bytes] | None = None
    stopping: threading.Event = field(default_factory=threading.Event)
    # Set once the web server has answered its first /healthz: the daemons start then.
    serving: threading.Event = field(default_factory=threading.Event)
    # Set by the signal handlers, read by the watch loop: a plain flag, because the handlers must take no lock.
    signalled: bool = False
    daemon_launch: DaemonLaunch | None = None
    # The Redis URL built-in daemons get: the server's own, or a loopback port when they run as another user.
    daemon_redis_url: str = ""
    # The umask the server was started with, given back to the daemons (files of the server itself are private).
    inherited_umask: int = 0o022
    # The write end of the web server's start gate (app/server/web.py), until it is opened.
    web_gate: int | None = None

    def run(self) -> int:
        listener = None
        self.inherited_umask = os.umask(0o077)
        self.take_signals()
        try:
            self._prepare_secrets()
            listener = open_listener(self.settings)
            # First: it loads the application while Redis starts and the database is migrated; it listens only
            # once the gate opens (app/server/web.py).
            self._start_web(listener)
            redis_port = self._plan_daemons()
            self._start_redis(redis_port)
            first_user_needed = migrate_database(self.settings)
            self._unless_signalled()
            self._wait_for_redis()
            self._unless_signalled()
            self._open_web_gate()
            self._start_notifier()  # niced: it waits out a Redis outage, at its start too (app/server/notifier.py)
            self._unless_signalled()
            self.daemons = [BuiltinDaemon(f"builtin-{n + 1}") for n in range(self.settings.provisioner_daemons)]
            self._announce(first_user_needed)
            # The rest waits until the web server answers: on a small machine, the daemons' and the
            # loops' own start-up would otherwise take the CPU the web workers need to boot, and none of them has
            # anything to do before the web server serves (the daemons register with it over HTTP).
            threading.Thread(target=self._start_when_serving, name="after-start", daemon=True).start()
            return self._watch()
        except _StoppedWhileStarting:
            return 0
        finally:
            if listener is not None:
                listener.close()
            self.shutdown()
            os.umask(self.inherited_umask)

    def _prepare_secrets(self) -> None:
        for notice in prepare_data_dir(self.settings):
            self.echo(notice)
        # A fresh internal key each run: only the daemons started here can use it.
        self.settings = replace(ensure_secret_key(self.settings), builtin_daemon_psk=secrets.token_urlsafe(32))
        if self.settings.embedded_redis:
            password = embedded_redis_password(self.settings.data_dir)
            self.settings = replace(self.settings, redis_url=embedded_redis_url(self.settings.data_dir, password))
        self.daemon_redis_url = self.settings.redis_url

    def _plan_daemons(self) -> int | None:
        """Prepare the built-in daemons' user, cache dir and sandbox; the loopback port the embedded Redis must
        also listen on when they run as another user (the data dir, with Redis's socket, is closed to them)."""
        if not self.settings.provisioner_daemons:
            return None
        from app.server.builtin_daemons import DaemonSetupError, plan_daemon_launch

        settings = self.settings
        separate_user = os.geteuid() == 0
        redis_port = free_loopback_port() if separate_user and settings.embedded_redis else None
        redis_socket = None if settings.embedded_redis else _unix_socket_path(settings.redis_url)
        try:
            self.daemon_launch = plan_daemon_launch(settings, redis_socket=redis_socket, echo=self.echo)
        except DaemonSetupError as exc:
            raise StartupError(str(exc)) from exc
        if redis_port is not None:
            password = embedded_redis_password(settings.data_dir)
            self.daemon_redis_url = f"redis://:{password}@127.0.0.1:{redis_port}/0"
        return redis_port

    def _start_redis(self, tcp_port: int | None) -> None:
        if self.settings.embedded_redis:
            # Not waited for here: it starts while the database is migrated (_wait_for_redis, before the web).
            self.redis_process = launch_embedded_redis(
                self.settings.data_dir, password=embedded_redis_password(self.settings.data_dir), tcp_port=tcp_port
            )
            return
        import redis

        client = redis.Redis.from_url(self.settings.redis_url, socket_connect_timeout=5)
        try:
            client.ping()
        except redis.RedisError as exc:
            raise StartupError(f"cannot reach Redis at {self.settings.redis_url}: {exc}") from exc
        finally:
            client.close()

    def _wait_for_redis(self) -> None:
        if self.redis_process is None:
            return
        try:
            wait_for_embedded_redis(
                self.redis_process, self.settings.data_dir, password=embedded_redis_password(self.settings.data_dir)
            )
        except EmbeddedRedisError as exc:
            raise StartupError(str(exc)) from exc

    def _start_web(self, listener: socket.socket) -> None:
        gate_read, self.web_gate = os.pipe()
        env = child_environment(self.settings) | {START_GATE_FD_ENV: str(gate_read)}
        argv = [
            sys.executable, "-m", "gunicorn",
            "--config", "python:app.server.web",
            "--no-control-socket",
            # gevent, with request-head timeouts and per-client connection limits (app/server/worker.py)
            "--worker-class", "app.server.worker.GuardedGeventWorker",
            "--workers", str(self.settings.web_workers),
            "--worker-connections", str(self.settings.web_worker_connections),
            "--bind", f"fd://{listener.fileno()}",
            "--graceful-timeout", "5",
            "--keep-alive", "30",
            "--log-level", "warning",
            "app.factory:create_app(migrations=False)",
        ]  # fmt: skip
        try:
            self.children.append(spawn(argv, env=env, pass_fds=[listener.fileno(), gate_read]))
        finally:
            os.close(gate_read)

    def _open_web_gate(self) -> None:
        """Let the web server listen and fork its workers: the database and Redis are ready."""
        try:
            if self.web_gate is not None:
                os.write(self.web_gate, OPEN)
        except BrokenPipeError:
            pass  # it exited while loading the application: the watch loop reports it and stops
        self._close_web_gate()

    def _close_web_gate(self) -> None:
        """Closed without its byte (a failed start), the gate stops the web server instead."""
        if self.web_gate is not None:
            os.close(self.web_gate)
            self.web_gate = None

    def _start_when_serving(self) -> None:
        """Wait for the web server, then start the loops (threads); the watch loop starts the processes, because a
        child's parent-death signal fires when the *thread* that started it ends, and this one ends now."""
        wait_until_serving(self.settings, self.stopping)
        if self.stopping.is_set():
            return
        threading.Thread(target=self._maintain, name="maintenance", daemon=True).start()
        if self.settings.lifecycle_interval:
            threading.Thread(target=self._run_lifecycle, name="lifecycle", daemon=True).start()
        if self.settings.prebuilds_interval:
            threading.Thread(target=self._run_prebuilds, name="prebuilds", daemon=True).start()
        self.serving.set()

    def _start_notifier(self) -> None:
        """The worker that sends notification emails and webhooks (app/server/notifier.py)."""
        argv = [sys.executable, "-m", "app.server.notifier"]
        # Niced: it imports the whole application (a CPU second and more) while the web workers do the same, and on
        # a small machine it took their CPU and delayed the first answer; mails and webhooks can wait that long.
        self.children.append(spawn(argv, env=child_environment(self.settings), niceness=NOTIFIER_NICENESS))

    def _start_daemon(self, daemon: BuiltinDaemon) -> None:
        settings, launch = self.settings, self.daemon_launch
        if launch is None:  # planned in run() whenever there are daemons
            raise RuntimeError("built-in daemons were not planned")
        host = "127.0.0.1" if settings.host in ("0.0.0.0", "") else settings.host  # noqa: S104 - a comparison
        host = "[::1]" if host == "::" else (f"[{host}]" if ":" in host else host)
        # Only what a daemon needs: it must not inherit the database URL or any other server secret.
        env = launch.environment(os.environ)
        env.update(
            SLIPWAY_URL=f"http://{host}:{settings.port}",
            SLIPWAY_PROVISIONER_DAEMON_PSK=settings.builtin_daemon_psk,
            SLIPWAY_PROVISIONER_REDIS_URL=self.daemon_redis_url,
            SLIPWAY_PROVISIONER_DAEMON_NAME=daemon.name,
            SLIPWAY_PROVISIONER_CACHE_DIR=str(launch.cache_dir),
            SLIPWAY_TERRAFORM_PATH=settings.terraform_path,
            SLIPWAY_PROVISIONER_INIT_CACHE_SIZE=str(settings.provisioner_init_cache_size),
        )
        # -I: the working directory (the cache dir, which templates can write to) must never shadow a module.
        daemon.process = spawn(
            [sys.executable, "-I", "-m", "workers"],
            env=env,
            user=launch.user,
            cwd=launch.cache_dir,
            umask=self.inherited_umask,
            hold_sigint=True,  # the daemon takes it once it can: no traceback from a Ctrl-C while it imports
        )

    def _tend_daemons(self) -> None:
        if not self.serving.is_set():
            return
        now = time.monotonic()
        for daemon in self.daemons:
            if daemon.process is not None and daemon.process.poll() is None:
                continue
            if daemon.process is not None:
                code = daemon.process.returncode
                daemon.restarts += 1
                low, high = DAEMON_RESTART_BACKOFF_SECONDS
                daemon.next_start = now + min(low * 2 ** min(daemon.restarts - 1, 10), high)
                daemon.process = None
                self.echo(f"slipway: provisioner daemon {daemon.name} exited (code {code}); restarting it.")
            if now >= daemon.next_start:
                self._start_daemon(daemon)

    def _maintain(self) -> None:
        from app.factory import create_app
        from app.provisioning.maintenance import run_maintenance

        app = create_app(self.settings)
        while not self.stopping.wait(MAINTENANCE_INTERVAL_SECONDS):
            try:
                with app.app_context():
                    run_maintenance(self.settings)
            except Exception:  # the loop must outlive a database or Redis hiccup
                log.exception("maintenance pass failed; retrying in %.0f s", MAINTENANCE_INTERVAL_SECONDS)

    def _run_lifecycle(self) -> None:
        """The lifecycle executor's loop; with several replicas, each ticks and one acts per minute."""
        from app.core.extensions import db
        from app.factory import create_app
        from app.lifecycle.executor import run_tick

        app = create_app(self.settings)
        interval = self.settings.lifecycle_interval
        while not self.stopping.wait(interval):
            try:
                with app.app_context():
                    try:
                        run_tick()
                    finally:
                        db.session.remove()
            except Exception:  # the loop must outlive a database or Redis hiccup
                log.exception("lifecycle tick failed; retrying in %d s", interval)

    def _run_prebuilds(self) -> None:
        """The prebuilds reconciler's loop; with several replicas, the one holding its lock acts."""
        from app.core.extensions import db
        from app.factory import create_app
        from app.prebuilds.reconciler import run_tick

        app = create_app(self.settings)
        interval = self.settings.prebuilds_interval
        while not self.stopping.wait(interval):
            try:
                with app.app_context():
                    try:
                        run_tick(max_in_flight=self.settings.prebuilds_max_in_flight)
                    finally:
                        db.session.remove()
            except Exception:  # the loop must outlive a database or Redis hiccup
                log.exception("prebuilds tick failed; retrying in %d s", interval)

    def _announce(self, first_user_needed: bool) -> None:
        url = self.settings.access_url
        self.echo(f"Slipway is running at {url}  (data in {self.settings.data_dir})")
        if self.daemons and self.daemon_launch is not None:
            how = self.daemon_launch.description
            self.echo(f"{len(self.daemons)} built-in provisioner daemon(s) run the builds, {how}.")
        if first_user_needed:
            self.echo(f"No users yet: open {url}/setup to create the first user (the owner).")
        self.echo("Press Ctrl-C to stop.")

    def take_signals(self) -> None:
        """From the start, not once serving: Python's own SIGINT handling raises KeyboardInterrupt wherever the main
        thread is, even between a child's start and the line that records it (that child was never stopped), and
        click turned it into "Aborted!" and exit status 1. Start-up checks the flag between its steps instead."""
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, self._on_signal)

    def _unless_signalled(self) -> None:
        if self.signalled:
            raise _StoppedWhileStarting

    def _watch(self) -> int:
        try:
            while not self.signalled:
                time.sleep(0.5)  # a signal ends the sleep early (its handler runs, then the loop checks the flag)
                self._tend_daemons()
                for child in self.children:
                    if child.poll() is not None:
                        self.echo(
                            f"slipway: a server process exited unexpectedly (exit code {child.returncode}); stopping."
                        )
                        return 1
            self._drain()
            return 0
        finally:
            self.stopping.set()

    def _drain(self) -> None:
        """Keep serving for the drain period with /healthz failing, as Kubernetes expects of a pod it stops: the load
        balancer sees the replica unready and sends new requests elsewhere, requests in flight finish, and live
        streams end with a retry hint at their next event or heartbeat (clients resume on another replica, from
        their last event). A second signal ends the wait (it kills the children)."""
        period = self.settings.drain_period
        if period <= 0 or not self.serving.is_set():
            return
        draining_marker(self.settings.data_dir).touch()
        self.echo(f"Draining for {period} s: /healthz answers 503 and live streams end; then the server stops.")
        deadline = time.monotonic() + period
        while time.monotonic() < deadline and all(child.poll() is None for child in self.children):
            time.sleep(min(0.2, max(deadline - time.monotonic(), 0)))

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        # Python runs this on the main thread between any two bytecodes, maybe while that thread holds a lock:
        # setting the Event here could wait on its lock forever (the watch loop's own wait held it once, and the
        # server never stopped). So: a flag the loop reads, and killing needs no lock.
        if self.signalled:  # a second Ctrl-C: stop waiting politely
            for daemon in self.daemons:  # a second SIGINT: the daemon kills its Terraform now
                if daemon.process is not None and daemon.process.poll() is None:
                    os.kill(daemon.process.pid, signal.SIGINT)
            for child in self.children:
                child.kill()
        self.signalled = True

    def shutdown(self) -> None:
        self._close_web_gate()
        # A data dir that never was (a start refused for it) has no marker: that start's error is the one to tell.
        with contextlib.suppress(OSError):
            draining_marker(self.settings.data_dir).unlink(missing_ok=True)
        daemon_processes = [daemon.process for daemon in self.daemons if daemon.process is not None]
        if any(process.poll() is None for process in daemon_processes):
            self.echo("Stopping: built-in provisioner daemons cancel any running build first (Ctrl-C again: at once).")
            interrupt(daemon_processes, grace=BUILD_CANCEL_GRACE_SECONDS, force_grace=BUILD_KILL_GRACE_SECONDS)
        stop(daemon_processes + self.children, grace=SHUTDOWN_GRACE_SECONDS)
        self.daemons.clear()
        if self.redis_process is not None:
            stop([self.redis_process], grace=SHUTDOWN_GRACE_SECONDS)
            (self.settings.data_dir / "redis.sock").unlink(missing_ok=True)
        self.children.clear()
        self.redis_process = None


def prepare_data_dir(settings: Settings) -> list[str]:
    """Create the data dir (0700), or tighten an existing one; returns notices for the operator."""
    data_dir = settings.data_dir
    try:
        data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        probe = data_dir / ".write-test"
        probe.write_text("ok")
        probe.unlink()
        draining_marker(data_dir).unlink(missing_ok=True)  # left by a replica killed while draining
    except OSError as exc:
        raise StartupError(f"data dir {data_dir} is not writable: {exc.strerror}") from exc
    try:
        tightened = tighten_data_dir(data_dir)
    except OSError as exc:
        raise StartupError(f"cannot make {exc.filename} private (chmod): {exc.strerror}") from exc
    if not tightened:
        return []
    return [f"slipway: {tightened} path(s) in {data_dir} were open to other users; made them private (0700/0600)."]


def tighten_data_dir(data_dir: Path) -> int:
    """Make the data dir 0700 and what lies directly in it private (directories 0700, files 0600): the database,
    the secret key and Redis's files are no other user's business. Returns how many paths were changed."""
    changed = 0
    for path in [data_dir, *data_dir.iterdir()]:
        info = path.stat() if path == data_dir else path.lstat()
        if stat.S_ISDIR(info.st_mode):
            private = 0o700
        elif stat.S_ISREG(info.st_mode):
            private = 0o600
        else:
            continue  # links are not followed; Redis recreates its socket with its own mode
        if stat.S_IMODE(info.st_mode) & 0o077:
            os.chmod(path, private)
            changed += 1
    return changed


def free_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _unix_socket_path(url: str) -> Path | None:
    parts = urlsplit(url)
    return Path(parts.path) if parts.scheme == "unix" else None


def open_listener(settings: Settings) -> socket.socket:
    """Bind the web port here, so "address in use" is one clear line before anything else starts.

    Bound, not listening: gunicorn listens once its workers can answer. A socket listening from here on would
    accept connections during the migrations and the workers' start (10 s and more on a restart) and leave them
    waiting; refused instead, a client or a load balancer tries another replica at once.
    """
    family = socket.AF_INET6 if ":" in settings.host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # Accepted connections inherit this: without it, a response written as headers then body waits on the
    # client's delayed ACK (Nagle), adding up to 40 ms to small keep-alive requests.
    listener.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        listener.bind((settings.host, settings.port))
    except OSError as exc:
        listener.close()
        reason = "address already in use" if exc.errno == errno.EADDRINUSE else exc.strerror
        raise StartupError(f"cannot listen on {settings.address}: {reason}") from exc
    listener.set_inheritable(True)
    return listener


def migrate_database(settings: Settings) -> bool:
    """Create a new database from the models or apply migrations to an existing one (app/server/schema.py);
    returns True when the database has no user yet."""
    from sqlalchemy.exc import OperationalError, SQLAlchemyError

    from app.core.crypto import current_keyring
    from app.core.encryption_keys import KeyProblem, check_keys
    from app.core.extensions import db
    from app.server.schema import SchemaTooNew, bring_schema_to_head, schema_app, user_count

    app = schema_app(settings)
    try:
        with app.app_context(), migration_lock(settings.database_url):
            bring_schema_to_head()
            # Before serving: no row may be encrypted with a key this server lacks.
            check_keys(current_keyring())
            return user_count() == 0
    except (KeyProblem, SchemaTooNew) as exc:
        raise StartupError(str(exc)) from exc
    except OperationalError as exc:
        raise StartupError(f"cannot use the database: {exc.orig}".splitlines()[0]) from exc
    except SQLAlchemyError as exc:
        raise StartupError(f"database error while migrating: {exc}".splitlines()[0]) from exc
    finally:
        # The schema app is done with: its connections are not left for the collector to find still open.
        with app.app_context():
            db.engine.dispose()


@contextmanager
def migration_lock(database_url: str) -> Iterator[None]:
    """One replica migrates at a time: replicas started together on a fresh PostgreSQL database would otherwise
    create the same tables at once, and all but one exit on a duplicate key. The others wait, then find nothing to
    do. (SQLite is one host's file; its own locking serialises the migrations.)"""
    if not database_url.startswith("postgresql"):
        yield
        return
    from sqlalchemy import create_engine, text
    from sqlalchemy.pool import NullPool

    engine = create_engine(database_url, poolclass=NullPool)
    try:
        with engine.connect() as connection:
            # Session-level: held across the migrations' own transactions, gone if this process dies.
            connection.execute(text("SELECT pg_advisory_lock(:key)"), {"key": MIGRATION_LOCK_KEY})
            connection.commit()
            try:
                yield
            finally:
                connection.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": MIGRATION_LOCK_KEY})
                connection.commit()
    finally:
        engine.dispose()


def wait_until_serving(settings: Settings, stopping: threading.Event, *, limit: float = 120.0) -> None:
    """Return once the web server answers GET /healthz with 200 (or `stopping` is set, or after `limit` seconds, so
    that the daemons start even when the health check fails for a reason of its own).

    One request waits for the workers while gunicorn holds it in its listen queue; only before gunicorn listens is
    the connection refused, and then it is tried again shortly."""
    host = "127.0.0.1" if settings.host in ("0.0.0.0", "") else settings.host  # noqa: S104 - a comparison
    host = "::1" if host == "::" else host
    deadline = time.monotonic() + limit
    while not stopping.is_set() and time.monotonic() < deadline:
        connection = http.client.HTTPConnection(host, settings.port, timeout=max(deadline - time.monotonic(), 0.1))
        try:
            connection.request("GET", "/healthz")
            if connection.getresponse().status == 200:
                return
        except OSError:
            pass
        finally:
            connection.close()
        stopping.wait(0.05)


def child_environment(settings: Settings) -> dict[str, str]:
    """The environment of every child: the resolved settings, so children never re-derive them differently."""
    env = dict(os.environ)
    env.update(
        SLIPWAY_BUILTIN_DAEMON_PSK=settings.builtin_daemon_psk,
        SLIPWAY_ADDRESS=settings.address,
        SLIPWAY_ACCESS_URL=settings.access_url,
        SLIPWAY_DATA_DIR=str(settings.data_dir),
        SLIPWAY_DATABASE_URL=settings.database_url,
        SLIPWAY_REDIS_URL=settings.redis_url,
    )
    return env
