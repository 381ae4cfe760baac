"""List APIs page with ?limit=&offset= and say how many there are in X-Total-Count; without a limit they answer
their first 100 rows (the jobs list 50), and the CLI reads on to the end."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from flask import Flask, render_template
from flask.testing import FlaskClient

from app.core.pagination import PagePosition, page_of
from app.users.services import users_query
from cli.client import SlipwayClient
from cli.workspaces import read_log
from tests.conftest import PASSWORD, Persona
from tests.support import bulk
from tests.support.archives import tar_of
from tests.support.daemon import FakeDaemon, import_template, running_import
from tests.support.web import first_event, post_form, sign_in, stream_url
from tests.test_query_counts import add_workspaces

pytestmark = pytest.mark.databases("sqlite", "postgresql")

# Rows of the list's kind: more than two pages of three. Many are copies that share their original's created_at,
# so that only the id tiebreak keeps pages apart.
ROWS = 7


@dataclass(frozen=True)
class Scene:
    """What every paged list below reads: a template (its import ran on a stand-in daemon) and carol's workspace."""

    app: Flask
    personas: dict[str, Persona]
    template: dict[str, Any]
    daemon_id: str
    workspace_id: str


@dataclass(frozen=True)
class PagedList:
    path: Callable[[Scene], str]
    reader: str
    add_rows: Callable[[Scene], None]
    total: int  # what ``reader`` sees once the rows are added
    whole: str = ""  # the query that asks for everything (jobs answer 50 unless asked for more)


def tokens_of_carol_and_dave(scene: Scene) -> None:
    for name in ("carol", "dave"):
        bulk.add_tokens(scene.app, scene.personas[name].id, ROWS)


def notifications_of_carol_and_dave(scene: Scene) -> None:
    for name in ("carol", "dave"):
        bulk.add_notifications(scene.app, scene.personas[name].id, ROWS)


PAGED_LISTS = {
    "users": PagedList(
        lambda s: "/api/v2/users", "alice", lambda s: bulk.add_users(s.app, s.personas["dave"].id, ROWS), 4 + ROWS
    ),
    # carol's tokens only, not dave's.
    "tokens": PagedList(
        lambda s: "/api/v2/users/me/tokens",
        "carol",
        tokens_of_carol_and_dave,
        ROWS,
    ),
    "templates": PagedList(
        lambda s: "/api/v2/templates", "carol", lambda s: bulk.add_templates(s.app, s.template["id"], ROWS), 1 + ROWS
    ),
    "versions": PagedList(
        lambda s: f"/api/v2/templates/{s.template['id']}/versions",
        "bob",
        lambda s: bulk.add_versions(s.app, s.template["active_version_id"], ROWS),
        1 + ROWS,
    ),
    "builds": PagedList(
        lambda s: f"/api/v2/workspaces/{s.workspace_id}/builds",
        "carol",
        lambda s: bulk.add_builds(s.app, s.workspace_id, ROWS, s.daemon_id),
        1 + ROWS,
    ),
    "daemons": PagedList(
        lambda s: "/api/v2/provisionerdaemons", "alice", lambda s: bulk.add_daemons(s.app, s.daemon_id, ROWS), 1 + ROWS
    ),
    "keys": PagedList(
        lambda s: "/api/v2/provisionerkeys", "bob", lambda s: bulk.add_keys(s.app, s.personas["bob"].id, ROWS), ROWS
    ),
    # The import, carol's first build, and the copied imports.
    "jobs": PagedList(
        lambda s: "/api/v2/provisionerjobs",
        "alice",
        lambda s: bulk.add_versions(s.app, s.template["active_version_id"], ROWS),
        2 + ROWS,
        whole="?limit=500",
    ),
    "failing deliveries": PagedList(
        lambda s: "/api/v2/notifications/deliveries",
        "alice",
        lambda s: bulk.add_failing_deliveries(s.app, s.personas["carol"].id, ROWS),
        ROWS,
    ),
    # carol's notifications only, not dave's.
    "inbox": PagedList(
        lambda s: "/api/v2/notifications/inbox",
        "carol",
        notifications_of_carol_and_dave,
        ROWS,
    ),
}


@pytest.fixture
def scene(app: Flask, client: FlaskClient, personas: dict[str, Persona]) -> Scene:
    daemon = FakeDaemon(client)
    template = import_template(client, personas, daemon)
    add_workspaces(app, template["id"], personas["carol"].id, 1)
    workspace_id = client.get("/api/v2/workspaces", headers=personas["carol"].auth).json[0]["id"]
    return Scene(app, personas, template, daemon.id, workspace_id)


@pytest.mark.parametrize("listed", PAGED_LISTS.values(), ids=PAGED_LISTS.keys())
def test_each_list_pages_in_a_stable_order_with_the_total_its_reader_may_see(
    client: FlaskClient, scene: Scene, listed: PagedList
) -> None:
    listed.add_rows(scene)
    path, auth = listed.path(scene), scene.personas[listed.reader].auth

    whole = client.get(path + listed.whole, headers=auth)
    assert whole.status_code == 200, whole.json
    ids = [item["id"] for item in whole.json]
    assert len(ids) == len(set(ids)) == listed.total
    assert whole.headers["X-Total-Count"] == str(listed.total)
    pages = [client.get(f"{path}?limit=3&offset={offset}", headers=auth) for offset in range(0, listed.total, 3)]
    assert [item["id"] for page in pages for item in page.json] == ids
    assert {page.headers["X-Total-Count"] for page in pages} == {str(listed.total)}
    assert client.get(f"{path}?limit=3&offset={listed.total}", headers=auth).json == []

    for bad in ("limit=-1", "limit=many", "offset=-1", "offset=first"):
        reply = client.get(f"{path}?{bad}", headers=auth)
        assert reply.status_code == 400 and reply.json["validations"][0]["field"] == bad.split("=")[0], bad


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


def test_lists_answer_their_first_page_unless_asked_and_the_cli_reads_on(
    app: Flask, client: FlaskClient, scene: Scene
) -> None:
    """An unbounded answer grows with the deployment, so a list without ``?limit`` answers its first 100 rows (the
    jobs list its newest 50) and the total says how many more there are; the CLI follows the total."""
    alice, carol = scene.personas["alice"], scene.personas["carol"]
    bulk.add_notifications(scene.app, carol.id, 103)
    inbox = client.get("/api/v2/notifications/inbox", headers=carol.auth)
    assert len(inbox.json) == 100 and inbox.headers["X-Total-Count"] == "103"
    assert client.get("/api/v2/notifications/inbox?limit=100", headers=carol.auth).json == inbox.json
    assert client.get("/api/v2/notifications/inbox?limit=0", headers=carol.auth).json == inbox.json

    add_workspaces(app, scene.template["id"], carol.id, 102, start=10)  # and the scene's own
    first = client.get("/api/v2/workspaces", headers=carol.auth)
    assert len(first.json) == 100 and first.headers["X-Total-Count"] == "103"
    token = carol.auth["Authorization"].removeprefix("Bearer ")
    cli = SlipwayClient("http://slipway.test", token, transport=httpx.WSGITransport(app=app))
    everything = cli.get("/api/v2/workspaces")
    assert isinstance(everything, list) and len({item["id"] for item in everything}) == 103
    assert cli.get("/api/v2/workspaces?limit=5") == client.get("/api/v2/workspaces?limit=5", headers=carol.auth).json

    bulk.add_versions(scene.app, scene.template["active_version_id"], 51)  # and the import and 103 workspaces' builds
    jobs = client.get("/api/v2/provisionerjobs", headers=alice.auth)
    assert len(jobs.json) == 50 and jobs.headers["X-Total-Count"] == "155"
    assert len(client.get("/api/v2/provisionerjobs?limit=500", headers=alice.auth).json) == 155


def test_a_log_is_read_a_page_at_a_time(app: Flask, client: FlaskClient, personas: dict[str, Persona]) -> None:
    daemon, job_id, version_id = running_import(client, personas)
    written = [f"line {n}" for n in range(1500)]
    for start in range(0, len(written), 500):
        batch = {"logs": [{"output": output} for output in written[start : start + 500]]}
        assert daemon.call(f"/jobs/{job_id}/logs", batch).status_code == 200
    path, auth = f"/api/v2/templateversions/{version_id}/logs", personas["bob"].auth
    first = client.get(f"{path}?limit=5", headers=auth).json
    rest = client.get(f"{path}?limit=5&after={first[-1]['id']}", headers=auth).json
    assert [line["output"] for line in first + rest] == written[:10]
    assert client.get(f"{path}?limit=0", headers=auth).status_code == 400
    # Without a limit, a page of 1,000 lines (not the whole log in one body); the CLI reads on to the end.
    default = client.get(path, headers=auth).json
    assert [line["output"] for line in default] == written[:1000]
    assert len(client.get(f"{path}?limit=10000", headers=auth).json) == 1500
    token = auth["Authorization"].removeprefix("Bearer ")
    cli = SlipwayClient("http://slipway.test", token, transport=httpx.WSGITransport(app=app))
    assert [line.output for line in read_log(cli, path)] == written


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
    assert len(names(first)) == 25 and "1–25 of 30" in first
    assert 'rel="next" href="/workspaces?page=2&amp;after=' in first  # read by key from page 1's last row
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
    # A filtered list is counted ten pages ahead: thirty is within that, so the count is exact.
    filtered = pages.get("/workspaces?q=status:pending").get_data(as_text=True)
    assert "1–25 of 30" in filtered and "more than" not in filtered


def test_a_list_counted_a_few_pages_ahead_says_there_are_more(app: Flask, personas: dict[str, Persona]) -> None:
    """Four users, a page of one, counted one page ahead: page 1 knows of two pages and more, page 3 of all."""
    users = users_query()  # the Users page's own (people only: not the prebuilds system user)
    with app.test_request_context("/users"):
        first = page_of(users, 1, size=1, pages_ahead=1)
        assert (first.total, first.more, first.count) == (2, True, 2)
        assert [user.username for user in first.rows] == ["alice"]
        third = page_of(users, 3, size=1, pages_ahead=1)
        assert (third.total, third.more, third.count) == (4, False, 4)
        assert [user.username for user in third.rows] == ["carol"]
        html = render_template("_pager.html", page=first)
        assert "1–1 of more than 2" in html and "Page 1 of 2+" in html and 'rel="next"' in html
        past_the_end = page_of(users, 9, size=1, pages_ahead=1)  # counted to the end: the last page
        assert (past_the_end.number, past_the_end.more) == (4, False)
        # Page 2 read by key, from the row before it (a Next link) or the row after it (a Previous link), is
        # counted as page 2 by offset is.
        second = page_of(users, 2, size=1, pages_ahead=1)
        for position in (PagePosition(2, after=first.rows[0].id), PagePosition(2, before=third.rows[0].id)):
            keyed = page_of(users, position, size=1, pages_ahead=1)
            assert (
                (keyed.rows, keyed.total, keyed.more)
                == (second.rows, second.total, second.more)
                == (second.rows, 3, True)
            ), position


def test_the_users_and_templates_pages_show_one_page_at_a_time(
    app: Flask, client: FlaskClient, personas: dict[str, Persona]
) -> None:
    template = import_template(client, personas, FakeDaemon(client))
    bulk.add_users(app, personas["carol"].id, 30)  # 34 with the personas
    bulk.add_templates(app, template["id"], 29)  # 30
    pages = app.test_client()
    sign_in(pages, "alice@example.com", PASSWORD)
    for path, total in (("/users", 34), ("/templates", 30)):
        first = pages.get(path).get_data(as_text=True)
        # The users list's Next names the row it continues from (app/core/keyset.py); the templates list's does not.
        assert f"1–25 of {total}" in first and f'rel="next" href="{path}?page=2' in first, path
        last = pages.get(f"{path}?page=2").get_data(as_text=True)
        assert f"26–{total} of {total}" in last and 'rel="prev"' in last, path
    # A template's versions too, newest first, on its page.
    bulk.add_versions(app, template["active_version_id"], 29)  # 30
    first = pages.get(f"/templates/{template['name']}").get_data(as_text=True)
    assert "1–25 of 30" in first and f'rel="next" href="/templates/{template["name"]}?page=2"' in first
    assert len(re.findall(r'<a href="/templates/versions/', first)) == 25
    assert "26–30 of 30" in pages.get(f"/templates/{template['name']}?page=2").get_data(as_text=True)
    # A template upload refused shows the list again from its own view: the pages still link to the list.
    refused = post_form(pages, "/templates", {"name": ""})
    assert refused.status_code == 400 and 'href="/templates?page=2"' in refused.get_data(as_text=True)


def test_the_provisioners_page_shows_a_page_of_daemons_and_the_head_of_the_queue(
    app: Flask, client: FlaskClient, personas: dict[str, Persona]
) -> None:
    daemon = FakeDaemon(client, "real")
    bulk.add_daemons(app, daemon.id, 30)  # 31, the copies older than it
    pages = app.test_client()
    sign_in(pages, "alice@example.com", PASSWORD)
    first = pages.get("/provisioners").get_data(as_text=True)
    rows = re.findall(r'data-daemon="([^"]+)"', first)
    assert rows[0] == "real" and len(rows) == 25 and "1–25 of 31" in first
    assert 'rel="next" href="/provisioners?page=2"' in first
    # The live parts re-read and watch the same page, and the partial's pager links to the page itself.
    second = pages.get("/provisioners?page=2").get_data(as_text=True)
    assert len(re.findall(r'data-daemon="', second)) == 6 and "26–31 of 31" in second
    assert "/provisioners/overview?page=2" in second and "page=2" in second.split("/provisioners/events?", 1)[1]
    partial = pages.get("/provisioners/overview?page=2").get_data(as_text=True)
    assert 'rel="prev" href="/provisioners?page=1"' in partial
    assert set(rows).isdisjoint(re.findall(r'data-daemon="([^"]+)"', second))


def test_a_template_pages_versions_refresh_in_place_when_one_is_pushed(
    app: Flask, client: FlaskClient, personas: dict[str, Persona]
) -> None:
    template = import_template(client, personas, FakeDaemon(client))
    bulk.add_versions(app, template["active_version_id"], 29)  # 30: two pages
    pages = app.test_client()
    sign_in(pages, "carol@example.com", PASSWORD)  # members read a template's versions too
    second = pages.get(f"/templates/{template['name']}?page=2").get_data(as_text=True)
    versions_stream = stream_url(second)
    assert "/versions/events?" in versions_stream and "page=2" in versions_stream  # it watches the page on screen
    assert f'hx-get="/templates/{template["name"]}?page=2"' in second  # and the refresh re-reads it

    bob = personas["bob"]
    upload = client.post(
        "/api/v2/files", data=tar_of({"main.tf": ""}), headers={**bob.auth, "Content-Type": "application/x-tar"}
    )
    pushed = client.post(
        "/api/v2/templateversions", json={"file_id": upload.json["id"], "template_id": template["id"]}, headers=bob.auth
    )
    assert pushed.status_code == 201, pushed.json  # after the page rendered: every version moves one place down
    received = first_event(pages, versions_stream)
    assert received.startswith(b": connected") and b"event: refresh\ndata: changed" in received


def test_pages_with_several_lists_turn_each_lists_pages_on_its_own(
    app: Flask, client: FlaskClient, personas: dict[str, Persona]
) -> None:
    """The account page's tokens, secrets and sessions, and the Provisioners page's keys besides its daemons."""
    carol, bob = personas["carol"], personas["bob"]
    bulk.add_tokens(app, carol.id, 30)
    for number in range(27):
        body = {"name": f"s{number:02}", "value": "v"}
        assert client.post("/api/v2/users/me/secrets", json=body, headers=carol.auth).status_code == 201
    bulk.add_keys(app, bob.id, 30)
    pages = app.test_client()
    sign_in(pages, "carol@example.com", PASSWORD)

    first = pages.get("/account").get_data(as_text=True)
    assert len(re.findall(r'data-secret="', first)) == 25 and "1–25 of 27" in first
    assert 'href="/account?tokens_page=2"' in first and 'href="/account?secrets_page=2"' in first
    both = pages.get("/account?tokens_page=2&secrets_page=2").get_data(as_text=True)
    assert "26–30 of 30" in both and "26–27 of 27" in both  # each list on its own second page
    assert re.findall(r'data-secret="([^"]+)"', both) == ["s25", "s26"]
    assert 'href="/account?tokens_page=1&amp;secrets_page=2"' in both  # turning one keeps the other's place
    refused = post_form(pages, "/account/secrets", {"name": "", "value": ""}, token_from="/account")
    assert refused.status_code == 400 and 'href="/account?secrets_page=2"' in refused.get_data(as_text=True)

    admin = app.test_client()
    sign_in(admin, "bob@example.com", PASSWORD)
    keys = admin.get("/provisioners?keys_page=2").get_data(as_text=True)
    table = keys.split('id="key-table"', 1)[1].split("</table>", 1)[0]
    assert len(re.findall(r"<strong>key\d+</strong>", table)) == 5 and "26–30 of 30" in keys
    assert 'href="/provisioners?keys_page=1"' in keys
