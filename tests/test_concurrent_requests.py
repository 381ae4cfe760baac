"""Many requests at once on one thing, on both databases: one wins, the others get a clear 409, none a 500."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from tests.conftest import Persona
from tests.support.daemon import FakeDaemon, held_first_build, import_template

pytestmark = pytest.mark.databases("sqlite", "postgresql")

RACERS = 20


def race(app: Flask, request: Callable[[FlaskClient, int], Any]) -> list[Any]:
    """``request`` from RACERS threads released together, each with its own client; the replies in order."""
    clients = [app.test_client() for _ in range(RACERS)]
    start = threading.Barrier(RACERS)
    replies: list[Any] = [None] * RACERS

    def run(number: int) -> None:
        start.wait()
        replies[number] = request(clients[number], number)

    threads = [threading.Thread(target=run, args=(number,)) for number in range(RACERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    return replies


def test_stop_requests_at_once_make_one_build(app: Flask, client: FlaskClient, personas: dict[str, Persona]) -> None:
    carol = personas["carol"]
    daemon = FakeDaemon(client)
    workspace = held_first_build(client, personas, daemon, import_template(client, personas, daemon), "busy")
    done = daemon.call(f"/jobs/{workspace['latest_build']['job']['id']}/complete", {"workspace_build": {}})
    assert done.status_code == 204

    replies = race(
        app,
        lambda racer, _: racer.post(
            f"/api/v2/workspaces/{workspace['id']}/builds", json={"transition": "stop"}, headers=carol.auth
        ),
    )
    assert Counter(reply.status_code for reply in replies) == {201: 1, 409: RACERS - 1}
    assert all("already active" in reply.json["message"] for reply in replies if reply.status_code == 409)
    builds = client.get(f"/api/v2/workspaces/{workspace['id']}", headers=carol.auth).json["latest_build"]
    assert builds["build_number"] == 2 and builds["transition"] == "stop"


def test_one_name_asked_for_at_once_in_any_case_makes_one_workspace(
    app: Flask, client: FlaskClient, personas: dict[str, Persona]
) -> None:
    carol = personas["carol"]
    template = import_template(client, personas, FakeDaemon(client))
    spellings = ["dev", "Dev", "DEV", "dEv"]

    def create(racer: FlaskClient, number: int) -> Any:
        name = spellings[number % len(spellings)]
        values = [{"name": "region", "value": "eu"}]
        body = {"template_id": template["id"], "name": name, "rich_parameter_values": values}
        return racer.post("/api/v2/workspaces", json=body, headers=carol.auth)

    replies = race(app, create)
    assert Counter(reply.status_code for reply in replies) == {201: 1, 409: RACERS - 1}, [
        reply.json for reply in replies if reply.status_code not in (201, 409)
    ]
    names = [item["name"] for item in client.get("/api/v2/workspaces", headers=carol.auth).json]
    assert len([name for name in names if name.lower() == "dev"]) == 1
    # and any spelling finds it
    found = client.get("/api/v2/workspaces?owner=me&name=DEV", headers=carol.auth).json
    assert [item["name"].lower() for item in found] == ["dev"]
