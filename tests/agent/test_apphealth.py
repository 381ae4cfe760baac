"""App health checks against a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from agent.apphealth import AppHealthReporter, HealthTracker
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
