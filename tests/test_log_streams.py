"""Live logs over SSE against a real server process; a stand-in daemon decides when each line appears."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager

import httpx
import pytest

from tests.conftest import PASSWORD
from tests.support.http_daemon import HttpDaemon, api_client, new_version, sign_up_owner
from tests.support.server import ServerProcess
from tests.support.sse import Event, events

PSK = "stream-test-psk"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    env = {"SLIPWAY_PROVISIONER_DAEMON_PSK": PSK}
    with ServerProcess(tmp_path_factory.mktemp("streams") / "data", "--provisioner-daemons", "0", env=env) as running:
        yield running


@pytest.fixture(scope="module")
def owner_token(server: ServerProcess) -> str:
    return sign_up_owner(server.url, PASSWORD)


@pytest.fixture
def api(server: ServerProcess, owner_token: str) -> Iterator[httpx.Client]:
    with api_client(server.url, owner_token) as client:
        yield client


@pytest.fixture
def daemon(server: ServerProcess) -> Iterator[HttpDaemon]:
    stand_in = HttpDaemon(server.url, PSK)
    yield stand_in
    stand_in.close()


def _follow(api: httpx.Client, version_id: str, **headers: str) -> AbstractContextManager[httpx.Response]:
    return api.stream("GET", f"/templateversions/{version_id}/logs?follow=true", headers=headers)


def test_stream_delivers_lines_while_the_job_runs(api: httpx.Client, daemon: HttpDaemon) -> None:
    version = new_version(api)
    job_id = version["job"]["id"]
    assert daemon.call(f"/jobs/{job_id}/acquire").status_code == 200
    received: list[Event] = []
    first_line = threading.Event()

    def read() -> None:
        with _follow(api, version["id"]) as response:
            assert response.headers["content-type"].startswith("text/event-stream")
            for event in events(response):
                received.append(event)
                if event.event == "log":
                    first_line.set()

    reader = threading.Thread(target=read)
    reader.start()
    daemon.log(job_id, "planning the world")
    assert first_line.wait(10), "a line must arrive while the job still runs"
    assert api.get(f"/templateversions/{version['id']}").json()["job"]["status"] == "running"
    daemon.log(job_id, "second", stage="Starting workspace")
    daemon.call(f"/jobs/{job_id}/fail", {"error": "boom"})
    reader.join(10)
    assert [e.json["output"] for e in received if e.event == "log"] == ["planning the world", "second"]
    assert received[-1].event == "end" and received[-1].json["status"] == "failed"
    # How it ended, and why: the error's first line, and no log line to point at (none was an error).
    failure = {"message": "boom", "resource": "", "log_line_id": None, "summary": ""}
    failure |= {"changed_parameters": [], "parameters_used": False, "likely_fix": ""}
    assert received[-1].json == {"status": "failed", "error": "boom", "failure": failure}
    ids = [e.id for e in received if e.event == "log"]
    assert ids == sorted(ids) and None not in ids


def test_finished_job_replays_after_the_cursor_then_ends(api: httpx.Client, daemon: HttpDaemon) -> None:
    version = new_version(api)
    job_id = version["job"]["id"]
    daemon.call(f"/jobs/{job_id}/acquire")
    daemon.log(job_id, "a", "b", "c")
    daemon.call(f"/jobs/{job_id}/complete", {"template_import": {}})
    with _follow(api, version["id"]) as response:
        everything = list(events(response))
    assert [e.json["output"] for e in everything if e.event == "log"] == ["a", "b", "c"]
    first_id = everything[0].id
    with _follow(api, version["id"], **{"Last-Event-ID": str(first_id)}) as response:
        rest = list(events(response))
    assert [e.json["output"] for e in rest if e.event == "log"] == ["b", "c"]
    assert rest[-1].event == "end" and rest[-1].json["status"] == "succeeded"


def test_every_line_exactly_once_across_twenty_reconnects(api: httpx.Client, daemon: HttpDaemon) -> None:
    version = new_version(api)
    job_id = version["job"]["id"]
    daemon.call(f"/jobs/{job_id}/acquire")
    sent = [f"line {n}" for n in range(200)]

    def produce() -> None:
        for start in range(0, len(sent), 10):
            daemon.log(job_id, *sent[start : start + 10])
        daemon.call(f"/jobs/{job_id}/complete", {"template_import": {}})

    producer = threading.Thread(target=produce)
    producer.start()
    seen: list[Event] = []
    cursor, disconnects, ended = 0, 0, False
    while not ended:
        with _follow(api, version["id"], **({"Last-Event-ID": str(cursor)} if cursor else {})) as response:
            for event in events(response):
                if event.event == "end":
                    ended = True
                    break
                seen.append(event)
                cursor = event.id or cursor
                if disconnects < 20 and len(seen) % 7 == 0:  # drop the connection mid-stream
                    disconnects += 1
                    break
    producer.join(10)
    assert disconnects == 20
    assert [e.json["output"] for e in seen] == sent
    assert len({e.id for e in seen}) == len(sent)


def test_streams_are_guarded_per_persona(server: ServerProcess, api: httpx.Client, daemon: HttpDaemon) -> None:
    version = new_version(api)
    assert httpx.get(f"{server.url}/api/v2/templateversions/{version['id']}/logs?follow=true").status_code == 401
    api.post("/users", json={"username": "carol", "email": "carol@example.com", "password": PASSWORD})
    login = httpx.post(f"{server.url}/api/v2/users/login", json={"email": "carol@example.com", "password": PASSWORD})
    with api_client(server.url, login.json()["session_token"]) as carol:
        # An upload of no template yet is its uploader's and template admins' alone: for others it does not exist.
        assert carol.get(f"/templateversions/{version['id']}/logs?follow=true").status_code == 404
        assert carol.get("/workspacebuilds/00000000-0000-0000-0000-000000000000/logs?follow=true").status_code == 404
    assert api.get(f"/templateversions/{version['id']}/logs?follow=true&after=x").status_code == 400


def test_stream_starts_at_once_and_sends_heartbeat_comments_first(api: httpx.Client) -> None:
    version = new_version(api)
    with _follow(api, version["id"]) as response:
        first = next(response.iter_raw())
    assert first.startswith(b": connected")
