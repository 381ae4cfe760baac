"""Coder's template filter (``?q=go deprecated:false exact_name:docker``) and the templates list's orders
(``?sort=``), in the API and on the Templates page: each term narrows the list in SQL, a member sees the same list,
and what the filter cannot read says what it takes without losing what was typed."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from flask import Flask
from flask.testing import FlaskClient

from app.catalog.models import Template, TemplateAcl
from app.core.columns import new_id
from app.core.extensions import db
from app.organizations.models import DEFAULT_ORGANIZATION_ID
from tests.conftest import PASSWORD, Persona
from tests.support.web import sign_in

pytestmark = pytest.mark.databases("sqlite", "postgresql")

START = datetime(2026, 1, 1, tzinfo=UTC)


def names(client: FlaskClient, auth: dict[str, str], query: str) -> list[str]:
    reply = client.get(f"/api/v2/templates?{query}", headers=auth)
    assert reply.status_code == 200, reply.json
    return [template["name"] for template in reply.json]


@pytest.fixture(autouse=True)
def templates(app: Flask, personas: dict[str, Persona]) -> None:
    """Made in the order docker, go-dev, python (created and updated a day apart); go-dev is deprecated and python
    is shown as "Go and Python"."""
    rows = [("docker", "", ""), ("go-dev", "", "Use python."), ("python", "Go and Python", "")]
    with app.app_context():
        for day, (name, display_name, deprecation) in enumerate(rows):
            when = START + timedelta(days=day)
            template = Template(
                id=new_id(), name=name, display_name=display_name, deprecation_message=deprecation,
                created_by=personas["bob"].id, created_at=when, updated_at=when,
            )  # fmt: skip
            # As every new template: Everyone (the default organisation's group) may use it.
            everyone = TemplateAcl(template_id=template.id, group_id=DEFAULT_ORGANIZATION_ID, role="use")
            db.session.add_all([template, everyone])
        db.session.commit()


@pytest.mark.parametrize("who", ["alice", "bob", "carol"])
def test_each_term_narrows_the_templates_list_for_everyone(
    client: FlaskClient, personas: dict[str, Persona], who: str
) -> None:
    auth = personas[who].auth
    assert names(client, auth, "") == ["docker", "go-dev", "python"]
    assert names(client, auth, "q=GO") == ["go-dev", "python"]  # a bare word: part of the name or display name
    assert names(client, auth, "q=deprecated:true") == ["go-dev"]
    assert names(client, auth, "q=deprecated:false") == ["docker", "python"]
    assert names(client, auth, "q=go deprecated:false") == ["python"]
    assert names(client, auth, "q=exact_name:Docker") == ["docker"]
    assert names(client, auth, "q=exact_name:dock") == []
    assert names(client, auth, "name=python&q=deprecated:true") == []  # ?name= still means the one template
    reply = client.get("/api/v2/templates?q=go&limit=1", headers=auth)
    assert reply.headers["X-Total-Count"] == "2" and len(reply.json) == 1


def test_the_list_reads_in_the_order_asked(client: FlaskClient, personas: dict[str, Persona]) -> None:
    auth = personas["carol"].auth
    assert names(client, auth, "sort=-name") == ["python", "go-dev", "docker"]
    assert names(client, auth, "sort=-created") == ["python", "go-dev", "docker"]
    assert names(client, auth, "sort=updated") == ["docker", "go-dev", "python"]


@pytest.mark.parametrize(
    ("query", "field", "says"),
    [
        ("q=deprecated:maybe", "q", "deprecated: takes true or false, not 'maybe'."),
        ("q=owner:me", "q", "Unknown filter 'owner': use name:, exact_name:, deprecated:."),
        ("q=exact_name:", "q", "exact_name: needs a value, as in exact_name:docker."),
        ("sort=size", "sort", "Unknown sort 'size': use name, -name, created, -created, updated, -updated."),
    ],
)
def test_what_the_filter_cannot_read_is_a_400_that_says_what_it_takes(
    client: FlaskClient, personas: dict[str, Persona], query: str, field: str, says: str
) -> None:
    reply = client.get(f"/api/v2/templates?{query}", headers=personas["carol"].auth)
    assert reply.status_code == 400
    assert reply.json["validations"][0]["field"] == field and reply.json["message"] == says, reply.json


@pytest.mark.parametrize("who", ["bob", "carol"])
def test_the_templates_page_filters_and_sorts_and_keeps_what_was_typed(
    client: FlaskClient, personas: dict[str, Persona], who: str
) -> None:
    sign_in(client, f"{who}@example.com", PASSWORD)
    page = client.get("/templates?q=go").get_data(as_text=True)
    assert 'value="go"' in page and 'href="/templates/python"' in page and 'href="/templates/docker"' not in page

    sorted_page = client.get("/templates?sort=-updated").get_data(as_text=True)
    assert 'aria-sort="descending"' in sorted_page
    links = [sorted_page.index(f'href="/templates/{name}"') for name in ("python", "go-dev", "docker")]
    assert links == sorted(links)
    assert "sort=updated" in sorted_page  # a second click turns it around

    nothing = client.get("/templates?q=rust").get_data(as_text=True)
    assert 'id="no-template-match"' in nothing and 'value="rust"' in nothing

    bad = client.get("/templates?q=deprecated:maybe")
    assert bad.status_code == 400
    text = bad.get_data(as_text=True)
    assert 'value="deprecated:maybe"' in text and "takes true or false" in text and 'aria-invalid="true"' in text
