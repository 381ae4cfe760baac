"""Coder's user filter (``?q=status:suspended role:owner login_type:password ann``) and the users list's orders
(``?sort=``), in the API and on the Users page: each term narrows the list in SQL, and what it cannot read says
what it takes, without losing what was typed."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import update

from app.core.extensions import db
from app.users.models import User
from tests.conftest import PASSWORD, Persona
from tests.support.web import sign_in

pytestmark = pytest.mark.databases("sqlite", "postgresql")


def names(client: FlaskClient, auth: dict[str, str], query: str) -> list[str]:
    reply = client.get(f"/api/v2/users?{query}", headers=auth)
    assert reply.status_code == 200, reply.json
    return [user["username"] for user in reply.json]


@pytest.fixture
def seen(app: Flask, personas: dict[str, Persona]) -> None:
    """dave was seen an hour ago, carol a minute ago, bob never; alice's own calls count too, so she is set last."""
    now = datetime.now(UTC)
    with app.app_context():
        for name, when in (("dave", now - timedelta(hours=1)), ("carol", now - timedelta(minutes=1)), ("bob", None)):
            db.session.execute(update(User).where(User.id == personas[name].id).values(last_seen_at=when))
        db.session.commit()


def test_each_term_narrows_the_users_list(client: FlaskClient, personas: dict[str, Persona]) -> None:
    alice = personas["alice"].auth
    suspended = client.patch(f"/api/v2/users/{personas['dave'].id}", json={"status": "suspended"}, headers=alice)
    assert suspended.status_code == 200, suspended.json

    assert names(client, alice, "") == ["alice", "bob", "carol", "dave"]
    assert names(client, alice, "q=status:suspended") == ["dave"]
    assert names(client, alice, "q=status:active") == ["alice", "bob", "carol"]
    assert names(client, alice, "q=role:owner") == ["alice"]
    assert names(client, alice, "q=role:template-admin") == ["bob"]
    assert names(client, alice, "q=role:member") == ["alice", "bob", "carol", "dave"]  # everyone is a member
    assert names(client, alice, "q=login_type:oidc") == []
    assert names(client, alice, "q=CAR") == ["carol"]  # a bare word: part of a username or email, any case
    assert names(client, alice, "q=name:example.com status:active role:owner") == ["alice"]
    reply = client.get("/api/v2/users?q=role:owner&limit=1", headers=alice)
    assert reply.headers["X-Total-Count"] == "1"


@pytest.mark.parametrize(
    ("query", "field", "says"),
    [
        ("q=role:king", "q", "Unknown role 'king': use owner, template-admin, user-admin, auditor, member."),
        ("q=colour:red", "q", "Unknown filter 'colour': use status:, role:, login_type:, name:."),
        ("q=status:", "q", "status: needs a value, as in status:active."),
        ('q=name:"ann', "q", "A quote is not closed."),
        ("sort=height", "sort", "Unknown sort 'height': use username, -username, created, -created, last_seen,"),
    ],
)
def test_what_the_filter_cannot_read_is_a_400_that_says_what_it_takes(
    client: FlaskClient, personas: dict[str, Persona], query: str, field: str, says: str
) -> None:
    reply = client.get(f"/api/v2/users?{query}", headers=personas["alice"].auth)
    assert reply.status_code == 400
    assert reply.json["validations"][0]["field"] == field and reply.json["message"].startswith(says), reply.json


@pytest.mark.usefixtures("seen")
def test_the_list_reads_in_the_order_asked(client: FlaskClient, personas: dict[str, Persona]) -> None:
    alice = personas["alice"].auth
    assert names(client, alice, "sort=-username") == ["dave", "carol", "bob", "alice"]
    assert names(client, alice, "sort=created") == ["alice", "bob", "carol", "dave"]
    # Never seen counts as longest ago; alice was seen just now, by this very call.
    assert names(client, alice, "sort=-last_seen") == ["alice", "carol", "dave", "bob"]
    assert names(client, alice, "sort=last_seen") == ["bob", "dave", "carol", "alice"]


@pytest.mark.usefixtures("seen")
def test_the_users_page_filters_and_sorts_and_keeps_what_was_typed(
    client: FlaskClient, personas: dict[str, Persona]
) -> None:
    sign_in(client, "alice@example.com", PASSWORD)
    page = client.get("/users?q=car").get_data(as_text=True)
    assert 'value="car"' in page and "carol@example.com" in page and "dave@example.com" not in page

    sorted_page = client.get("/users?sort=-last_seen").get_data(as_text=True)
    assert 'aria-sort="descending"' in sorted_page
    assert sorted_page.index("carol@example.com") < sorted_page.index("dave@example.com")
    assert "sort=last_seen" in sorted_page  # a second click turns it around

    nothing = client.get("/users?q=zed").get_data(as_text=True)
    assert 'id="no-user-match"' in nothing

    bad = client.get("/users?q=role:king")
    assert bad.status_code == 400
    text = bad.get_data(as_text=True)
    assert 'value="role:king"' in text and "Unknown role &#39;king&#39;" in text and 'aria-invalid="true"' in text


@pytest.mark.parametrize("who", ["bob", "carol"])
def test_only_owners_list_users(client: FlaskClient, personas: dict[str, Persona], who: str) -> None:
    assert client.get("/api/v2/users?q=role:owner", headers=personas[who].auth).status_code == 403
    sign_in(client, f"{who}@example.com", PASSWORD)
    assert client.get("/users?q=role:owner").status_code in (302, 403)
