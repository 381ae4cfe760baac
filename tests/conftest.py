"""Shared fixtures: real Redis, real SQLite and PostgreSQL, and the personas alice, bob, carol and dave."""

from __future__ import annotations

import dataclasses
import functools
import gc
import shutil
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
from flask import Flask
from flask.testing import FlaskClient
from flask_migrate import upgrade
from werkzeug.security import generate_password_hash

from app.core.config import Settings, load_settings
from app.core.extensions import db
from app.events import close_relay
from app.factory import create_app
from app.server.embedded_redis import start_embedded_redis
from app.server.processes import stop
from app.users import services
from app.users.tokens import issue_session_token
from tests.support.openapi import check_api_replies
from tests.support.postgres import PostgresCluster

PASSWORD = "correct-horse-battery"
# The cycle collector's thresholds in test processes (Python's are 700, 10, 10): see pytest_collection_finish.
GC_THRESHOLDS = (50_000, 20, 10)

# tests/test_suite_rules.py runs the suite's own rules on small suites of its making.
pytest_plugins = ("pytester",)


def pytest_configure(config: pytest.Config) -> None:
    _take_the_stop_signals()


def pytest_collection_finish(session: pytest.Session) -> None:
    """Everything imported so far (the application, every test module, Playwright) lives as long as the run: the cycle
    collector's full passes need not walk it again and again. Each test's app is tens of thousands of objects, most
    in cycles; collected less often, in larger batches (three quarters of ``create_app``'s time was the collector)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


# Modules that stop or starve what they share (a network namespace's link, the PostgreSQL cluster, Redis) or hold a
# server under load on purpose (floods, slowloris, the soak, a 6 s hang timeout): in parallel runs they take turns
# on one worker, so that none of them is another's fault.
FAULTS = {
    "test_network_faults", "test_database_outage", "test_soak", "test_slowloris", "test_live_limits",
    "test_live_limits_websockets", "test_provisioner_reliability",
}  # fmt: skip
# Modules that share one deployment (tests/support/deployment.py's shared_deployment): one unit in parallel runs and
# next to each other in a serial one, so that it starts once.
SHARED_DEPLOYMENT = {
    "test_presets_e2e", "test_user_secrets_e2e", "test_cli_templates", "test_prebuilds_e2e", "test_quotas_e2e",
}  # fmt: skip
# What a module uses that makes it end to end (a real `slipway server`, daemons or agents) or a browser test.
E2E_SUPPORT = (
    "tests.support.server", "tests.support.deployment", "tests.support.provisionerd", "tests.support.soak",
    "tests.support.agent_bundle", "tests.support.http_daemon", "tests.support.rolling",
)  # fmt: skip
BROWSER_SUPPORT = ("tests.support.browser", "playwright.")


def pytest_itemcollected(item: pytest.Item) -> None:
    """Marks each test for the slices a developer runs (``-m "not e2e"``, ``-m browser``, ``-m faults``,
    ``-m terraform``)."""
    module = item.path.stem
    uses = _support_used_by(item)
    # Real Terraform runs with our provider: tests/workers/conftest.py's `terraform`, or its provider install.
    if {"terraform", "coder_cli_config"} & set(getattr(item, "fixturenames", ())):
        item.add_marker(pytest.mark.terraform)
    if module in FAULTS:
        item.add_marker(pytest.mark.faults)
    if "browser" in uses:
        item.add_marker(pytest.mark.browser)
    if uses or module in FAULTS:
        item.add_marker(pytest.mark.e2e)


@pytest.hookimpl(tryfirst=True, optionalhook=True)  # optional: a plain run without xdist loads it too
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Parallel workers (``-n``) take a whole module at a time, so that its module-scoped servers and browsers start
    once; the fault modules are one unit, so that they take turns. (xdist's own ``loadgroup`` cannot group by a
    marker under pytest 9, whose node ids it no longer rewrites; its ``loadfile`` cannot put modules together.)"""
    from xdist.scheduler import LoadScopeScheduling

    class ModuleScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            stem = Path(module).stem
            return "faults" if stem in FAULTS else "shared-deployment" if stem in SHARED_DEPLOYMENT else module

    return ModuleScheduling(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The groups that take longest (faults, then browsers, then servers) are handed out first, so that no worker
    starts a long one at the end of the run; the modules sharing a deployment go together, at the rank of the
    longest of them. A stable sort: each module's tests keep their order."""
    weight = {"faults": 0, "browser": 1, "e2e": 2}

    def rank(item: pytest.Item) -> int:
        return min((weight[mark.name] for mark in item.iter_markers() if mark.name in weight), default=3)

    shared = min((rank(item) for item in items if item.path.stem in SHARED_DEPLOYMENT), default=3)
    items.sort(key=lambda item: (shared, 0) if item.path.stem in SHARED_DEPLOYMENT else (rank(item), 1))


def _support_used_by(item: pytest.Item) -> set[str]:
    """Which kinds of real parts the item's module uses, from what it imported."""
    module = getattr(item, "module", None)
    found: set[str] = set()
    for value in vars(module).values() if module is not None else ():
        origin = getattr(value, "__module__", None) or getattr(value, "__name__", "")
        if not isinstance(origin, str):
            continue
        if origin.startswith(BROWSER_SUPPORT):
            found.add("browser")
        elif origin.startswith(E2E_SUPPORT):
            found.add("e2e")
    return found


def pytest_runtest_setup(item: pytest.Item) -> None:
    # Again before every test: code that takes signals for itself (the agent, the daemon, `slipway ssh`) leaves
    # its own handler, or SIG_DFL from asyncio's remove_signal_handler, behind when a test runs it in-process.
    _take_the_stop_signals()


@pytest.hookimpl(trylast=True)  # after the test's own fixtures, which may still hold a page, are torn down
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """A test process keeps its one Chromium (tests/support/browser.py) from one browser test to the next, and its
    shared deployment (tests/support/deployment.py) from one module of SHARED_DEPLOYMENT to the next; each is stopped
    before a test that does not use it, so that what follows does not carry an idle browser or server."""
    browser = sys.modules.get("tests.support.browser")
    if browser is not None and (nextitem is None or nextitem.get_closest_marker("browser") is None):
        browser.close_shared_browser()
    deployment = sys.modules.get("tests.support.deployment")
    if deployment is not None and (nextitem is None or nextitem.path.stem not in SHARED_DEPLOYMENT):
        deployment.close_shared_deployment()
    if nextitem is not None and nextitem.path != item.path:
        _freeze_what_the_module_left()


def _freeze_what_the_module_left() -> None:
    """Between modules (their fixtures torn down): the module's garbage collected, then what outlives it (caches,
    session fixtures, what a module keeps) left out of every later pass, as pytest_collection_finish does for what
    was imported. A worker's heap grows to 600-900 MB over a run, and each full pass walked all of it: one
    ``gc.collect()`` late in a run took 16 s. Only the objects since the last module boundary are walked here."""
    gc.collect()
    gc.freeze()


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


@dataclass
class Template:
    """A migrated database to copy: a file (SQLite) or a database name (PostgreSQL), and the personas in it."""

    source: str
    personas: dict[str, Persona] | None = None


@pytest.fixture(scope="session")
def migrated_templates(
    tmp_path_factory: pytest.TempPathFactory, redis_server: str, postgres: PostgresCluster
) -> dict[tuple[str, bool], Template]:
    """Migrate once per backend, and copy that once more with the personas in it; each test then gets a fresh copy
    (a file copy, or CREATE DATABASE ... TEMPLATE) of the one it needs, rather than 8 inserts and commits each."""
    root = tmp_path_factory.mktemp("db-templates")
    bare, seeded = root / "template.db", root / "personas.db"

    def app_on(url: str) -> Flask:
        return create_app(make_settings(root, url, redis_server))

    postgres.execute("CREATE DATABASE slipway_template")
    for url in (f"sqlite:///{bare}", postgres.url("slipway_template")):
        app = app_on(url)
        with app.app_context():
            upgrade()
        close_app(app)
    shutil.copy(bare, seeded)
    postgres.execute("CREATE DATABASE slipway_personas TEMPLATE slipway_template")

    def with_personas(source: str, url: str) -> Template:
        app = app_on(url)
        personas = _create_personas(app)
        close_app(app)
        return Template(source, personas)

    return {
        ("sqlite", False): Template(str(bare)),
        ("sqlite", True): with_personas(str(seeded), f"sqlite:///{seeded}"),
        ("postgresql", False): Template("slipway_template"),
        ("postgresql", True): with_personas("slipway_personas", postgres.url("slipway_personas")),
    }


BACKENDS = ("sqlite", "postgresql")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Each module (or test) that reaches the database says on which: both where its SQL can differ between them
    (queries, locking, claims, migrations, search, paging, JSON, concurrency), SQLite alone where it cannot (route
    guards, forms, pages). A module that says neither is refused at collection, so none is forgotten."""
    if "database_url" not in metafunc.fixturenames:
        return
    marker = metafunc.definition.get_closest_marker("databases")
    if marker is None or not marker.args or set(marker.args) - set(BACKENDS):
        raise pytest.UsageError(
            f"{metafunc.definition.nodeid} reaches the database: mark its module (or it) with "
            f'pytest.mark.databases("sqlite") or pytest.mark.databases("sqlite", "postgresql") '
            f"(both when its SQL can differ between the databases)"
        )
    metafunc.parametrize("database_url", marker.args, indirect=True)


@pytest.fixture
def database_url(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    migrated_templates: dict[tuple[str, bool], Template],
    postgres: PostgresCluster,
) -> Iterator[str]:
    # A test that asks for the personas starts from the copy that has them (the `personas` fixture finds them there).
    template = migrated_templates[request.param, "personas" in request.fixturenames]
    if request.param == "sqlite":
        target = tmp_path / "slipway.db"
        shutil.copy(template.source, target)
        url = f"sqlite:///{target}"
    else:
        name = f"test_{uuid.uuid4().hex[:12]}"
        postgres.execute(f"CREATE DATABASE {name} TEMPLATE {template.source}")
        url = postgres.url(name)
    if template.personas is not None:
        SEEDED_PERSONAS[url] = template.personas
    yield url
    SEEDED_PERSONAS.pop(url, None)
    if request.param == "postgresql":
        postgres.execute(f"DROP DATABASE {name} WITH (FORCE)")


# The personas already in a test's database, by its URL (see `database_url`).
SEEDED_PERSONAS: dict[str, dict[str, Persona]] = {}


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
    check_api_replies(app)  # every JSON answer of the API against the OpenAPI document (tests/support/openapi.py)
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
def personas(app: Flask, database_url: str) -> dict[str, Persona]:
    """alice (owner), bob (template admin), carol and dave (members), each with a session token."""
    seeded = SEEDED_PERSONAS.get(database_url)
    if seeded is not None:
        return {name: dataclasses.replace(persona) for name, persona in seeded.items()}
    return _create_personas(app)  # a test that asked for them only once its database was made


def _create_personas(app: Flask) -> dict[str, Persona]:
    people = {}
    # The real hash of PASSWORD (scrypt, salted), computed once per run rather than four times per test.
    with app.app_context(), pytest.MonkeyPatch.context() as patch:
        patch.setattr(services, "generate_password_hash", _hash_once)
        for name, role_list in PERSONA_ROLES.items():
            user = services.create_user(name, f"{name}@example.com", PASSWORD, role_list)
            # Made once per run (in the template database): it must outlive even a whole run on one worker.
            token = issue_session_token(user, 24 * 3600)
            people[name] = Persona(user.id, name, user.email, PASSWORD, token)
    return people


@functools.cache
def _hash_once(password: str) -> str:
    return generate_password_hash(password)


def _slipway_executable() -> str:
    return shutil.which("slipway") or str(Path(__file__).resolve().parent.parent / ".venv" / "bin" / "slipway")


def start_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """Start the installed `slipway` command, for a test that acts on what it prints while it runs."""
    return subprocess.Popen(
        [_slipway_executable(), *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def run_cli(
    *args: str, env: dict[str, str] | None = None, input_text: str | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """Run the installed `slipway` command as a user would."""
    return subprocess.run(
        [_slipway_executable(), *args],
        env=env,
        input=input_text,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
