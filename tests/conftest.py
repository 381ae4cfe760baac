"""Shared fixtures: real Redis, real SQLite and PostgreSQL, and the personas alice, bob, carol and dave."""

from __future__ import annotations

import shutil
import signal
import subprocess
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis
from flask import Flask
from flask.testing import FlaskClient
from flask_migrate import upgrade

from app.core.config import Settings, load_settings
from app.core.extensions import db
from app.events import close_relay
from app.factory import create_app
from app.server.embedded_redis import start_embedded_redis
from app.server.processes import stop
from app.users import services
from app.users.tokens import issue_session_token
from tests.support.postgres import PostgresCluster

PASSWORD = "correct-horse-battery"


def pytest_configure(config: pytest.Config) -> None:
    _take_the_stop_signals()


def pytest_runtest_setup(item: pytest.Item) -> None:
    # Again before every test: code that takes signals for itself (the agent, the daemon, `slipway ssh`) leaves
    # its own handler, or SIG_DFL from asyncio's remove_signal_handler, behind when a test runs it in-process.
    _take_the_stop_signals()


def _take_the_stop_signals() -> None:
    # A suite started as a background job of a non-interactive shell (`make test &` in a script) inherits SIGINT
    # ignored, and so would every process it starts: the tests that press Ctrl-C on the CLI, the daemon or the
    # agent would wait for exits that never come. A handler, unlike "ignored", is reset to the default by exec.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    # A SIGTERM (a CI time limit, `kill`) ends the run as Ctrl-C does, so that the session's fixtures still stop
    # what they started: killed outright, the suite left its PostgreSQL cluster running.
    signal.signal(signal.SIGTERM, _interrupt)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    directory = tmp_path_factory.mktemp("redis")
    process = start_embedded_redis(directory)
    yield f"unix://{directory / 'redis.sock'}"
    stop([process], grace=5)


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresCluster]:
    cluster = PostgresCluster()
    cluster.start()
    yield cluster
    cluster.stop()


def make_settings(data_dir: Path, database_url: str, redis_url: str, **overrides: str) -> Settings:
    env = {
        "SLIPWAY_DATA_DIR": str(data_dir),
        "SLIPWAY_DATABASE_URL": database_url,
        "SLIPWAY_REDIS_URL": redis_url,
        "SLIPWAY_SECRET_KEY": "test-secret-key",
        **{f"SLIPWAY_{key.upper()}": value for key, value in overrides.items()},
    }
    return load_settings(env)


@pytest.fixture(scope="session")
def migrated_templates(
    tmp_path_factory: pytest.TempPathFactory, redis_server: str, postgres: PostgresCluster
) -> dict[str, str]:
    """Migrate once per backend; each test then gets a fresh copy (a file copy, or CREATE DATABASE ... TEMPLATE)."""
    root = tmp_path_factory.mktemp("db-templates")
    sqlite_file = root / "template.db"
    postgres.execute("CREATE DATABASE slipway_template")
    for url in (f"sqlite:///{sqlite_file}", postgres.url("slipway_template")):
        app = create_app(make_settings(root, url, redis_server))
        with app.app_context():
            upgrade()
        close_app(app)
    return {"sqlite": str(sqlite_file), "postgresql": "slipway_template"}


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    migrated_templates: dict[str, str],
    postgres: PostgresCluster,
) -> Iterator[str]:
    if request.param == "sqlite":
        target = tmp_path / "slipway.db"
        shutil.copy(migrated_templates["sqlite"], target)
        yield f"sqlite:///{target}"
        return
    name = f"test_{uuid.uuid4().hex[:12]}"
    postgres.execute(f"CREATE DATABASE {name} TEMPLATE {migrated_templates['postgresql']}")
    yield postgres.url(name)
    postgres.execute(f"DROP DATABASE {name} WITH (FORCE)")


@pytest.fixture
def settings(tmp_path: Path, database_url: str, redis_server: str) -> Settings:
    # The PSK lets the stand-in daemon of tests/support/daemon.py speak the provisioner protocol.
    return make_settings(tmp_path, database_url, redis_server, provisioner_daemon_psk="test-daemon-psk")


def close_app(app: Flask) -> None:
    """Close the app's database pool and Redis connections (pytest turns leaked sockets into errors)."""
    with app.app_context():
        db.engine.dispose()
    get_redis_of(app).close()
    close_relay(app)


def get_redis_of(app: Flask) -> redis.Redis:
    client: redis.Redis = app.extensions["slipway_redis"]
    return client


@pytest.fixture
def app(settings: Settings, redis_server: str) -> Iterator[Flask]:
    with redis.Redis.from_url(redis_server) as flusher:
        flusher.flushdb()
    app = create_app(settings)
    app.config["TESTING"] = True
    # No app context is held during the test: each request must get its own `g`, as in production.
    yield app
    close_app(app)


@pytest.fixture
def app_factory() -> Iterator[Callable[[Settings], Flask]]:
    """Build extra apps (e.g. with a broken dependency); their connection pools are closed afterwards."""
    built: list[Flask] = []

    def build(settings: Settings) -> Flask:
        built.append(create_app(settings))
        return built[-1]

    yield build
    for extra in built:
        close_app(extra)


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    return app.test_client()


# The cast of per-persona tests, in-process and against a real server alike.
PERSONA_ROLES = {"alice": ["owner"], "bob": ["template-admin"], "carol": [], "dave": []}


@dataclass
class Persona:
    id: str
    username: str
    email: str
    password: str
    token: str

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}


@pytest.fixture
def personas(app: Flask) -> dict[str, Persona]:
    """alice (owner), bob (template admin), carol and dave (members), each with a session token."""
    people = {}
    with app.app_context():
        for name, role_list in PERSONA_ROLES.items():
            user = services.create_user(name, f"{name}@example.com", PASSWORD, role_list)
            token = issue_session_token(user, 3600)
            people[name] = Persona(user.id, name, user.email, PASSWORD, token)
    return people


def run_cli(
    *args: str, env: dict[str, str] | None = None, input_text: str | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """Run the installed `slipway` command as a user would."""
    executable = shutil.which("slipway") or str(Path(__file__).resolve().parent.parent / ".venv" / "bin" / "slipway")
    return subprocess.run(
        [executable, *args],
        env=env,
        input=input_text,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
