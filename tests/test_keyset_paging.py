"""Deep pages are read by key: the dashboard's Previous/Next links name the row they continue from, the API takes
Coder's ``after_id``, and either reads the same rows as offset paging would, in every order a list can be sorted
in (NULLs and ties included), on both databases, from an index rather than a sort of every row."""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import Select, select, update

from app.core import keyset
from app.core.extensions import db
from app.core.pagination import Page, PagePosition, page_of
from app.provisioning.overview import all_jobs_query
from app.users.models import ROLE_OWNER, User
from app.users.search import SORTS, listed_users
from app.workspaces.models import Workspace
from app.workspaces.services import builds_query, visible_workspaces_query
from tests.conftest import PASSWORD, Persona
from tests.support import bulk
from tests.support.daemon import FakeDaemon, import_template
from tests.support.web import sign_in
from tests.test_query_counts import add_workspaces
from tests.test_query_plans import plan

pytestmark = pytest.mark.databases("sqlite", "postgresql")

SIZE = 3


def ids(page: Page) -> list[str]:
    return [row.id for row in page.rows]


def walk(query: Select[Any], pages: int) -> tuple[list[list[str]], list[list[str]]]:
    """Every page read by key, forwards from page 1 (each after the last row of the one before), then backwards
    from the last (each before the first row of the one after)."""
    forwards = [page_of(query, 1, SIZE)]
    while len(forwards) < pages:
        forwards.append(page_of(query, PagePosition(len(forwards) + 1, after=forwards[-1].rows[-1].id), SIZE))
    backwards = [forwards[-1]]
    while len(backwards) < pages:
        number = pages - len(backwards)
        backwards.insert(0, page_of(query, PagePosition(number, before=backwards[0].rows[0].id), SIZE))
    assert [page.number for page in forwards] == [page.number for page in backwards] == list(range(1, pages + 1))
    return [ids(page) for page in forwards], [ids(page) for page in backwards]


def test_every_users_order_pages_by_key_as_by_offset(app: Flask, personas: dict[str, Persona]) -> None:
    """Copies share their original's created_at (only the id tells them apart); last_seen_at is NULL for some and
    equal for others: every sort, either way, walks the same pages by key as by offset."""
    bulk.add_users(app, personas["carol"].id, 7)
    seen = datetime(2026, 1, 1, tzinfo=UTC)
    with app.app_context():
        users = db.session.scalars(select(User.id).order_by(User.username)).all()
        for number, user_id in enumerate(users):
            last_seen = None if number % 3 == 0 else seen + timedelta(hours=number % 2)
            db.session.execute(update(User).where(User.id == user_id).values(last_seen_at=last_seen))
        db.session.commit()
    with app.test_request_context("/users"):
        for sort in SORTS:
            query = listed_users("", sort)
            everyone = [user.id for user in db.session.scalars(query)]
            by_offset = [ids(page_of(query, number, SIZE)) for number in range(1, 5)]
            assert sum(by_offset, []) == everyone, sort
            forwards, backwards = walk(query, 4)
            assert forwards == backwards == by_offset, sort


def test_the_workspaces_page_follows_its_links_by_key_keeping_filter_and_sort(
    app: Flask, client: FlaskClient, personas: dict[str, Persona]
) -> None:
    template_id = str(import_template(client, personas, FakeDaemon(client))["id"])
    add_workspaces(app, template_id, personas["carol"].id, 1)  # w0, and 54 copies of it (w0001 to w0054)
    with app.app_context():
        first_id = db.session.scalar(select(Workspace.id))
    bulk.add_workspaces(app, str(first_id), 54)
    pages = app.test_client()
    sign_in(pages, "carol@example.com", PASSWORD)
    every = sorted(["w0", *(f"w{number:04}" for number in range(1, 55))], reverse=True)

    def names(text: str) -> list[str]:
        return re.findall(r"<strong>(w\d+)</strong>", text)

    def link(text: str, rel: str) -> str:
        found = re.search(rf'rel="{rel}" href="([^"]+)"', text)
        assert found, rel
        return html.unescape(found.group(1))

    first = pages.get("/workspaces?q=status:pending&sort=-name").get_data(as_text=True)
    second_url = link(first, "next")
    assert "after=" in second_url and "q=status:pending" in second_url and "sort=-name" in second_url
    second = pages.get(second_url).get_data(as_text=True)
    third_url = link(second, "next")
    third = pages.get(third_url).get_data(as_text=True)
    assert names(first) + names(second) + names(third) == every
    assert "51–55 of 55" in third and 'rel="next"' not in third
    # Its live stream watches the rows on screen, from the same row.
    stream = html.unescape(re.search(r'sse-connect="([^"]+)"', third).group(1))  # type: ignore[union-attr]
    assert "page=3" in stream and third_url.split("after=")[1].split("&")[0] in stream
    # Back by key (Previous names the page's first row), and back to page 1 without any row named.
    back_url = link(third, "prev")
    assert "before=" in back_url and names(pages.get(back_url).get_data(as_text=True)) == names(second)
    assert "before=" not in link(second, "prev") and "after=" not in link(second, "prev")
    # A row that is not on the list (deleted, or one she may not see): the page is found by its number.
    add_workspaces(app, template_id, personas["dave"].id, 1)
    with app.app_context():
        other = db.session.scalar(select(Workspace.id).where(Workspace.owner_id == personas["dave"].id))
    for cursor in ("after=gone", f"after={other}", "before=gone"):
        shown = pages.get(f"/workspaces?q=status:pending&sort=-name&page=2&{cursor}").get_data(as_text=True)
        assert names(shown) == names(second), cursor
    # The jobs page's links too: page 2 by key is page 2 by offset.
    admin = app.test_client()
    sign_in(admin, "alice@example.com", PASSWORD)
    jobs = admin.get("/provisioners/jobs").get_data(as_text=True)
    keyed, by_number = admin.get(link(jobs, "next")), admin.get("/provisioners/jobs?page=2")
    assert "after=" in link(jobs, "next") and keyed.status_code == 200
    job_ids = re.compile(r'data-job="([0-9a-f-]{36})"')
    shown = job_ids.findall(keyed.get_data(as_text=True))
    assert shown and shown == job_ids.findall(by_number.get_data(as_text=True))


def test_lists_take_after_id_where_coder_does(app: Flask, client: FlaskClient, personas: dict[str, Persona]) -> None:
    alice = personas["alice"]
    bulk.add_users(app, personas["carol"].id, 6)
    everyone = [user["id"] for user in client.get("/api/v2/users?sort=-created", headers=alice.auth).json]
    after = client.get(f"/api/v2/users?sort=-created&after_id={everyone[2]}&limit=3", headers=alice.auth)
    assert [user["id"] for user in after.json] == everyone[3:6]
    assert after.headers["X-Total-Count"] == str(len(everyone))  # the whole list's, as with offset
    with_offset = client.get(f"/api/v2/users?sort=-created&after_id={everyone[2]}&offset=2", headers=alice.auth)
    assert [user["id"] for user in with_offset.json] == everyone[5:]
    missing = client.get("/api/v2/users?after_id=nobody", headers=alice.auth)
    assert missing.status_code == 400 and "after_id" in missing.json["message"]
    # A workspace's builds, newest first.
    template = import_template(client, personas, FakeDaemon(client))
    add_workspaces(app, str(template["id"]), personas["carol"].id, 1)
    carol = personas["carol"]
    workspace_id = client.get("/api/v2/workspaces", headers=carol.auth).json[0]["id"]
    bulk.add_builds(app, workspace_id, 4, client.get("/api/v2/provisionerdaemons", headers=alice.auth).json[0]["id"])
    builds = client.get(f"/api/v2/workspaces/{workspace_id}/builds", headers=carol.auth).json
    after = client.get(f"/api/v2/workspaces/{workspace_id}/builds?after_id={builds[1]['id']}", headers=carol.auth)
    assert [build["build_number"] for build in after.json] == [build["build_number"] for build in builds[2:]]
    # A template's versions.
    versions_path = f"/api/v2/templates/{template['id']}/versions"
    versions = client.get(versions_path, headers=alice.auth).json
    assert client.get(f"{versions_path}?after_id={versions[0]['id']}", headers=alice.auth).json == versions[1:]
    # An id that is none of the list's rows is no cursor.
    other = client.get(f"/api/v2/workspaces/{workspace_id}/builds?after_id={versions[0]['id']}", headers=carol.auth)
    assert other.status_code == 400


NOBODY = "00000000-0000-0000-0000-000000000000"
NEW_YEAR = datetime(2026, 1, 1, tzinfo=UTC)
# List → (its query, the sort keys of a row to read on from, the index that must serve it).
KEYED_LISTS: dict[str, tuple[Callable[[], Select[Any]], list[Any], str]] = {
    "everyone's workspaces by name": (
        lambda: visible_workspaces_query(User(id=NOBODY, roles=[ROLE_OWNER])),
        ["m", NOBODY],
        "ix_workspaces_name_key_id",
    ),
    "every job, newest first": (all_jobs_query, [NEW_YEAR, NOBODY], "ix_provisioner_jobs_created_at_id"),
    "users by username": (lambda: listed_users("", ""), ["m", NOBODY], "ix_users_username_id"),
    "a workspace's builds": (
        lambda: builds_query(Workspace(id=NOBODY)),
        [5],
        # SQLite names a unique constraint's index itself.
        "uq_workspace_builds_workspace_id_number|sqlite_autoindex_workspace_builds",
    ),
}


@pytest.mark.parametrize("listed", KEYED_LISTS.values(), ids=KEYED_LISTS.keys())
def test_a_page_after_a_row_is_read_from_the_index_not_sorted(
    app: Flask, listed: tuple[Callable[[], Select[Any]], list[Any], str]
) -> None:
    """The query a deep page runs (the rows after a row, one page of them) seeks the index of the list's order: with
    the row's keys given (the API's after_id) and read inside the statement (the dashboard's links)."""
    make, values, index = listed
    with app.app_context():
        query = make()
        keys = keyset.sort_keys(query)
        in_statement = keyset.row_keys(query, keys, NOBODY)
        assert in_statement is not None  # no key of these lists may be NULL
        shown = [
            plan(query.where(keyset.after(keys, given)).limit(SIZE), discouraged=("seqscan", "sort"))
            for given in (values, in_statement)
        ]
        dialect = db.engine.dialect.name
        db.session.rollback()
    for plan_shown in shown:
        assert re.search(index, plan_shown), plan_shown
        # It seeks to the row (a range on the index, not a walk from the list's start that filters every row).
        seek = r"Index Cond: .*(<|>)|SEARCH \w+ USING INDEX [\w_]+ \(.*(<|>)\(?\?"
        assert re.search(seek, plan_shown), plan_shown
        if len(keys) > 1 and dialect == "postgresql":
            # To the row itself, by all its keys, not to the first of the rows that tie with it on the first key
            # (SQLite seeks by the first key whichever way the condition is put).
            assert "Index Cond: (ROW(" in plan_shown, plan_shown
        assert "TEMP B-TREE" not in plan_shown and "Sort" not in plan_shown, plan_shown
