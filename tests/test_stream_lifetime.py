"""Live streams end after their lifetime (1 s here) and their clients resume where they were: an API client
with Last-Event-ID, and a real browser's EventSource on the dashboard, each line exactly once."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import cast

import httpx
import pytest
from playwright.sync_api import Page

from tests.conftest import PASSWORD
from tests.support.browser import browser_page, sign_in_page
from tests.support.http_daemon import HttpDaemon, api_client, new_version, sign_up_owner
from tests.support.server import ServerProcess
from tests.support.sse import events
from tests.support.waiting import wait_until

PSK = "lifetime-psk"
CONNECTIONS_WANTED = 3  # the first connection and at least two resumed ones


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    env = {"SLIPWAY_PROVISIONER_DAEMON_PSK": PSK, "SLIPWAY_STREAM_MAX_LIFETIME": "1s"}
    data = tmp_path_factory.mktemp("lifetime") / "data"
    with ServerProcess(data, "--provisioner-daemons", "0", env=env, start_timeout=120) as running:
        yield running


@pytest.fixture(scope="module")
def owner_token(server: ServerProcess) -> str:
    return sign_up_owner(server.url, PASSWORD)


@dataclass
class Recorder:
    """The raw lines of one connection, as tests/support/sse.py's parser reads them."""

    response: httpx.Response
    lines: list[str] = field(default_factory=list)

    def iter_lines(self) -> Iterator[str]:
        for line in self.response.iter_lines():
            self.lines.append(line)
            yield line


@dataclass
class Follower:
    """An API client following a job's log, reconnecting with Last-Event-ID whenever a stream ends early."""

    url: str
    token: str
    version_id: str
    outputs: list[str] = field(default_factory=list)
    connections: list[list[str]] = field(default_factory=list)
    ended: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None

    def run(self) -> None:
        last_id: int | None = None
        try:
            with api_client(self.url, self.token) as api:
                while not self.ended.is_set():
                    headers = {"Last-Event-ID": str(last_id)} if last_id is not None else {}
                    path = f"/templateversions/{self.version_id}/logs?follow=true"
                    with api.stream("GET", path, headers=headers) as response:
                        assert response.status_code == 200, response.read()
                        recorder = Recorder(response)
                        self.connections.append(recorder.lines)
                        for event in events(cast(httpx.Response, recorder)):
                            if event.event == "end":
                                self.ended.set()
                            elif event.event == "log":
                                self.outputs.append(event.json["output"])
                                last_id = event.id
        except BaseException as exc:  # reported by the test thread
            self.error = exc
            self.ended.set()


def test_a_stream_ends_after_its_lifetime_and_the_client_resumes_without_loss_or_repeats(
    server: ServerProcess, owner_token: str
) -> None:
    with api_client(server.url, owner_token) as api:
        version = new_version(api)
    job_id = version["job"]["id"]
    daemon = HttpDaemon(server.url, PSK)
    try:
        assert daemon.call(f"/jobs/{job_id}/acquire").status_code == 200
        follower = Follower(server.url, owner_token, version["id"])
        reader = threading.Thread(target=follower.run, daemon=True)
        reader.start()
        sent: list[str] = []
        deadline = time.monotonic() + 60
        # Lines keep coming, each once the follower has the one before, until its streams were cut twice.
        while len(follower.connections) < CONNECTIONS_WANTED:
            sent.append(f"line {len(sent)}")
            daemon.log(job_id, sent[-1])
            wait_until(lambda: len(follower.outputs) >= len(sent) or follower.error, 15, repr(sent[-1]))
            assert follower.error is None, follower.error
            assert time.monotonic() < deadline, "the stream never ended for its lifetime"
        sent.append("the last line")
        daemon.log(job_id, sent[-1])
        assert daemon.call(f"/jobs/{job_id}/complete", {"template_import": {}}).is_success
        reader.join(30)
        assert follower.error is None, follower.error
        assert follower.ended.is_set()
    finally:
        daemon.close()
    assert follower.outputs == sent  # every line, in order, exactly once across the reconnects
    for lines in follower.connections[:-1]:  # each cut stream ended with the hint to come back
        assert lines[-2:] == ["retry: 1000", ""], lines[-4:]
        assert not any(line.startswith("event: end") for line in lines)


def test_the_dashboard_resumes_a_build_log_across_stream_lifetimes(server: ServerProcess, owner_token: str) -> None:
    with api_client(server.url, owner_token) as api:
        version = new_version(api)
    job_id = version["job"]["id"]
    daemon = HttpDaemon(server.url, PSK)
    page: Page
    with browser_page() as page:
        try:
            assert daemon.call(f"/jobs/{job_id}/acquire").status_code == 200
            daemon.log(job_id, "line 0")
            sign_in_page(page, server.url)
            reconnects: list[str] = []
            page.on("request", lambda request: reconnects.append(request.url) if "/log/stream" in request.url else None)
            page.goto(f"{server.url}/templates/versions/{version['id']}")
            page.wait_for_selector("text=line 0", timeout=15_000)
            sent, deadline = ["line 0"], time.monotonic() + 60
            while len(reconnects) < CONNECTIONS_WANTED:  # the page's stream was cut and resumed twice
                sent.append(f"line {len(sent)}")
                daemon.log(job_id, sent[-1])
                page.wait_for_selector(f"text='{sent[-1]}'", timeout=15_000)
                assert time.monotonic() < deadline, "the page's stream never ended for its lifetime"
            assert daemon.call(f"/jobs/{job_id}/complete", {"template_import": {}}).is_success
            page.wait_for_selector("#job-actions > *", timeout=15_000)  # the end event arrived (what to do next)
            shown = [text.strip() for text in page.locator("#log .log-text").all_inner_texts()]
            assert [text for text in shown if text.startswith("line ")] == sent  # each once, in order
        finally:
            daemon.close()
