"""App health checks against a real HTTP server on 127.0.0.1 (and a real WebSocket server)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
from websockets.http11 import Request, Response
from websockets.sync.server import ServerConnection, serve

from agent.apphealth import AppHealthReporter, HealthTracker, probe
from protocol.healthchecks import BadExpectation, status_rule
from protocol.resources import App, Healthcheck
from tests.agent.support import run


class AppServer:
    """Answers GET with ``status``, which a test changes while the checks run."""

    def __init__(self) -> None:
        self.status = 200
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # the name http.server calls
                self.send_response(owner.status)
                self.end_headers()

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/healthz"


@pytest.fixture
def app_server() -> Iterator[AppServer]:
    server = AppServer()
    thread = threading.Thread(target=server.httpd.serve_forever, daemon=True)
    thread.start()
    yield server
    server.httpd.shutdown()
    server.httpd.server_close()
    thread.join()


def test_threshold_failures_make_unhealthy_and_one_success_healthy() -> None:
    tracker = HealthTracker(threshold=2)
    assert tracker.state == "initializing"
    assert not tracker.record(False)
    assert tracker.record(False)
    assert tracker.state == "unhealthy"
    assert tracker.record(True)
    assert tracker.state == "healthy"


def test_health_follows_the_app_and_changes_are_posted(app_server: AppServer) -> None:
    posted: list[dict[str, str]] = []

    async def post(healths: dict[str, str]) -> None:
        posted.append(dict(healths))

    async def wait_for(state: str) -> None:
        while not posted or posted[-1]["web"] != state:
            await asyncio.sleep(0.05)

    async def scenario() -> None:
        apps = [
            App(slug="web", healthcheck=Healthcheck(url=app_server.url, interval=1, threshold=2)),
            App(
                slug="nothing-listens",
                healthcheck=Healthcheck(url="http://127.0.0.1:9/", interval=1, threshold=1),
            ),
            App(slug="no-check"),
        ]
        task = asyncio.create_task(AppHealthReporter(apps, post).run())
        await wait_for("healthy")
        app_server.status = 503
        await wait_for("unhealthy")
        app_server.status = 404  # below 500 is a success
        await wait_for("healthy")
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    run(scenario(), timeout=30)
    assert posted[0] == {"web": "initializing", "nothing-listens": "initializing"}
    assert {"web": "healthy", "nothing-listens": "unhealthy"} in posted
    assert [healths["web"] for healths in posted].count("unhealthy") == 1


class WebSocketApp:
    """A real WebSocket server whose plain GETs always answer 200, and whose upgrades it accepts or refuses (403,
    as Jupyter refuses a WebSocket whose Origin does not match its Host): what only a ws:// check can tell."""

    def __init__(self) -> None:
        self.accept = True

        def process_request(connection: ServerConnection, request: Request) -> Response | None:
            if request.headers.get("Upgrade", "").lower() != "websocket":
                return connection.respond(200, "page ok\n")
            return None if self.accept else connection.respond(403, "refused\n")

        self.server = serve(lambda websocket: websocket.close(), "127.0.0.1", 0, process_request=process_request)
        port = self.server.socket.getsockname()[1]
        self.http_url, self.ws_url = f"http://127.0.0.1:{port}/api", f"ws://127.0.0.1:{port}/api/events"


@pytest.fixture
def websocket_app() -> Iterator[WebSocketApp]:
    app = WebSocketApp()
    thread = threading.Thread(target=app.server.serve_forever, daemon=True)
    thread.start()
    yield app
    app.server.shutdown()
    thread.join()


def test_a_ws_healthcheck_counts_a_refused_upgrade_that_a_get_cannot_see(websocket_app: WebSocketApp) -> None:
    async def probes() -> tuple[bool, bool]:
        async with httpx.AsyncClient(timeout=5, trust_env=False) as client:
            return await probe(client, websocket_app.http_url), await probe(client, websocket_app.ws_url)

    assert run(probes()) == (True, True)
    websocket_app.accept = False
    # The page still answers, so a GET check stays healthy; the WebSocket check fails.
    assert run(probes()) == (True, False)

    # Nothing listening at all fails both.
    async def nothing() -> tuple[bool, bool]:
        async with httpx.AsyncClient(timeout=5, trust_env=False) as client:
            return await probe(client, "http://127.0.0.1:9/"), await probe(client, "ws://127.0.0.1:9/")

    assert run(nothing()) == (False, False)


@pytest.mark.parametrize(
    ("fragment", "passing"),
    [
        ("", {200, 302, 404, 403}),  # Coder's rule: below 500
        ("#expect=2xx", {200}),  # a refused API (403, 404) is a failure
        ("#expect=2xx,3xx", {200, 302}),
        ("#expect=200, 302", {200, 302}),
        ("#somewhere", {200, 302, 404, 403}),  # any other fragment means nothing
    ],
)
def test_an_http_healthcheck_counts_refusals_only_when_its_url_expects_success(
    app_server: AppServer, fragment: str, passing: set[int]
) -> None:
    async def passes(status: int) -> bool:
        app_server.status = status
        async with httpx.AsyncClient(timeout=5, trust_env=False) as client:
            return await probe(client, app_server.url + fragment)

    assert {status for status in (200, 302, 403, 404, 503) if run(passes(status))} == passing


@pytest.mark.parametrize("fragment", ["#expect=", "#expect=2x", "#expect=600", "#expect=ok"])
def test_an_expectation_that_names_no_status_never_passes(app_server: AppServer, fragment: str) -> None:
    async def passes() -> bool:
        async with httpx.AsyncClient(timeout=5, trust_env=False) as client:
            return await probe(client, app_server.url + fragment)

    assert not run(passes())
    with pytest.raises(BadExpectation, match="give status codes"):
        status_rule(app_server.url + fragment)


def test_a_websocket_healthcheck_takes_no_expectation() -> None:
    with pytest.raises(BadExpectation, match="101"):
        status_rule("ws://localhost:8888/api/events#expect=2xx")
