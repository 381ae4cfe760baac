"""List APIs page with ?limit=&offset= and say how many there are in X-Total-Count; without a limit they answer
everything, as they always did."""

from __future__ import annotations

import re

from flask import Flask
from flask.testing import FlaskClient

from tests.conftest import PASSWORD, Persona
from tests.support.daemon import FakeDaemon, import_template, running_import
from tests.support.web import sign_in
from tests.test_query_counts import add_workspaces


def test_workspaces_page_in_a_stable_order_with_a_total(
    app: Flask, client: FlaskClient, personas: dict[str, Persona]
) -> None:
    carol, alice = personas["carol"], personas["alice"]
    template_id = str(import_template(client, personas, FakeDaemon(client))["id"])
    add_workspaces(app, template_id, carol.id, 5)
    add_workspaces(app, template_id, alice.id, 2, start=10)

    whole = client.get("/api/v2/workspaces", headers=alice.auth)
    names = [(item["owner_name"], item["name"]) for item in whole.json]
    assert len(names) == 7 and whole.headers["X-Total-Count"] == "7"
    pages = [client.get(f"/api/v2/workspaces?limit=3&offset={offset}", headers=alice.auth) for offset in (0, 3, 6)]
    assert [len(page.json) for page in pages] == [3, 3, 1]
    assert {page.headers["X-Total-Count"] for page in pages} == {"7"}
    assert [(item["owner_name"], item["name"]) for page in pages for item in page.json] == names

    mine = client.get("/api/v2/workspaces?limit=2", headers=carol.auth)
    assert len(mine.json) == 2 and mine.headers["X-Total-Count"] == "5"  # a member counts only their own
    for bad in ("limit=-1", "limit=1001", "offset=x"):
        reply = client.get(f"/api/v2/workspaces?{bad}", headers=alice.auth)
        assert reply.status_code == 400 and reply.json["validations"][0]["field"] == bad.split("=")[0]


def test_a_log_is_read_a_page_at_a_time(client: FlaskClient, personas: dict[str, Persona]) -> None:
    daemon, job_id, version_id = running_import(client, personas)
    daemon.call(f"/jobs/{job_id}/logs", {"logs": [{"output": f"line {n}"} for n in range(7)]})
    path, auth = f"/api/v2/templateversions/{version_id}/logs", personas["bob"].auth
    first = client.get(f"{path}?limit=5", headers=auth).json
    rest = client.get(f"{path}?limit=5&after={first[-1]['id']}", headers=auth).json
    assert [line["output"] for line in first + rest] == [f"line {n}" for n in range(7)]
    assert client.get(f"{path}?limit=0", headers=auth).status_code == 400


def test_the_workspaces_page_shows_one_page_at_a_time(
    app: Flask, client: FlaskClient, personas: dict[str, Persona]
) -> None:
    template_id = str(import_template(client, personas, FakeDaemon(client))["id"])
    add_workspaces(app, template_id, personas["carol"].id, 30)
    pages = app.test_client()
    sign_in(pages, "carol@example.com", PASSWORD)

    def names(page: str) -> list[str]:
        return re.findall(r"<strong>(w\d+)</strong>", page)

    first = pages.get("/workspaces").get_data(as_text=True)
    assert len(names(first)) == 25 and "1–25 of 30" in first and 'rel="next" href="/workspaces?page=2"' in first
    second = pages.get("/workspaces?page=2").get_data(as_text=True)
    assert len(names(second)) == 5 and "26–30 of 30" in second and 'rel="prev"' in second
    assert set(names(first)) | set(names(second)) == {f"w{number}" for number in range(30)}
    # The live stream watches the page on screen, and a bookmark past the end shows the last page.
    assert "/workspaces/events?seen=" in second and "page=2" in second
    assert names(pages.get("/workspaces?page=9").get_data(as_text=True)) == names(second)
    bad = pages.get("/workspaces?page=0")
    assert bad.status_code == 400 and "page must be a whole number" in bad.get_data(as_text=True)
    other = app.test_client()
    sign_in(other, "dave@example.com", PASSWORD)
    assert "of 30" not in other.get("/workspaces").get_data(as_text=True)  # a member sees only their own
