"""Port sharing: Coder's port-share API, the template's widest level, and who may open a shared port (on a path
and on its port URL), per role, on SQLite and PostgreSQL. A 502 "not reachable" means the request got past every
check to the agent (which never connects here)."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from flask import Flask
from flask.testing import FlaskClient

from app.agents import app_tokens
from app.core.config import Settings
from tests.conftest import PASSWORD, Persona, make_settings
from tests.support.dev_urls import create_workspace
from tests.support.web import post_form, sign_in

pytestmark = pytest.mark.databases("sqlite", "postgresql")

PORT_HOST = "8000--main--w1--carol.apps.test"


@pytest.fixture
def settings(tmp_path: Path, database_url: str, redis_server: str) -> Settings:
    return make_settings(
        tmp_path,
        database_url,
        redis_server,
        provisioner_daemon_psk="test-daemon-psk",
        wildcard_access_url="*.apps.test",
    )


@pytest.fixture
def workspace(app: Flask, personas: dict[str, Persona]) -> dict[str, Any]:
    return create_workspace(app, personas)


def set_max_level(app: Flask, personas: dict[str, Persona], workspace: dict[str, Any], level: str) -> None:
    template_id = workspace["template"]["id"]
    reply = app.test_client().patch(
        f"/api/v2/templates/{template_id}", json={"max_port_share_level": level}, headers=personas["bob"].auth
    )
    assert reply.status_code == 200, reply.json
    assert reply.json["max_port_share_level"] == level


def share(app: Flask, person: Persona, workspace: dict[str, Any], level: str, port: int = 8000) -> Any:
    return app.test_client().post(
        f"/api/v2/workspaces/{workspace['id']}/port-share",
        json={"agent_name": "main", "port": port, "share_level": level, "protocol": "http"},
        headers=person.auth,
    )


def browser_of(app: Flask, persona: str | None) -> FlaskClient:
    browser = app.test_client()
    if persona is not None:
        sign_in(browser, f"{persona}@example.com", PASSWORD)
    return browser


def on_port_host(app: Flask, browser: FlaskClient, persona: str | None) -> int:
    """The status of the port URL for ``persona``, signed in there through the code exchange when signed in."""
    if persona is not None:
        back = browser.get("/api/v2/applications/auth-redirect", query_string={"redirect_uri": f"http://{PORT_HOST}/"})
        code = parse_qs(urlsplit(back.headers["Location"]).query)[app_tokens.CODE_PARAMETER][0]
        assert browser.get(f"/?{app_tokens.CODE_PARAMETER}={code}", base_url=f"http://{PORT_HOST}").status_code == 302
    status: int = browser.get("/", base_url=f"http://{PORT_HOST}").status_code
    return status


def test_ports_are_not_shared_beyond_the_templates_level(
    app: Flask, personas: dict[str, Persona], workspace: dict[str, Any]
) -> None:
    assert workspace["template"]["max_port_share_level"] == "owner"  # Coder's default
    refused = share(app, personas["carol"], workspace, "authenticated")
    assert refused.status_code == 400 and "at most" in refused.json["message"]
    set_max_level(app, personas, workspace, "authenticated")
    assert share(app, personas["carol"], workspace, "public").status_code == 400
    made = share(app, personas["carol"], workspace, "authenticated")
    assert made.status_code == 200
    assert made.json == {
        "workspace_id": workspace["id"], "agent_name": "main", "port": 8000, "share_level": "authenticated",
        "protocol": "http",
    }  # fmt: skip


def test_shares_are_listed_changed_and_removed(
    app: Flask, personas: dict[str, Persona], workspace: dict[str, Any]
) -> None:
    set_max_level(app, personas, workspace, "public")
    assert share(app, personas["carol"], workspace, "authenticated").status_code == 200
    assert share(app, personas["carol"], workspace, "public").status_code == 200  # the same port, changed
    assert share(app, personas["carol"], workspace, "authenticated", port=9000).status_code == 200
    url = f"/api/v2/workspaces/{workspace['id']}/port-share"
    listed = app.test_client().get(url, headers=personas["carol"].auth).json["shares"]
    assert [(item["port"], item["share_level"]) for item in listed] == [(8000, "public"), (9000, "authenticated")]
    # Lowering the template's level narrows existing shares at once.
    set_max_level(app, personas, workspace, "authenticated")
    listed = app.test_client().get(url, headers=personas["carol"].auth).json["shares"]
    assert [item["share_level"] for item in listed] == ["authenticated", "authenticated"]
    gone = app.test_client().delete(url, json={"agent_name": "main", "port": 9000}, headers=personas["carol"].auth)
    assert gone.status_code == 204
    again = app.test_client().delete(url, json={"agent_name": "main", "port": 9000}, headers=personas["carol"].auth)
    assert again.status_code == 404


@pytest.mark.parametrize(
    ("persona", "status"), [("carol", 200), ("alice", 200), ("bob", 403), ("dave", 404)]
)  # fmt: skip
def test_only_the_owner_and_deployment_owners_share(
    app: Flask, personas: dict[str, Persona], workspace: dict[str, Any], persona: str, status: int
) -> None:
    set_max_level(app, personas, workspace, "public")
    assert share(app, personas[persona], workspace, "public").status_code == status


@pytest.mark.parametrize(
    "body",
    [{"agent_name": "main", "port": 0, "share_level": "public"}, {"agent_name": "main", "port": 80, "share_level": "x"},
     {"agent_name": "nope", "port": 80, "share_level": "public"}, {"port": 80, "share_level": "public"},
     {"agent_name": "main", "port": "80", "share_level": "public"},
     {"agent_name": "main", "port": 80, "share_level": "public", "protocol": "ftp"}],
)  # fmt: skip
def test_bad_shares_are_refused(
    app: Flask, personas: dict[str, Persona], workspace: dict[str, Any], body: dict[str, Any]
) -> None:
    set_max_level(app, personas, workspace, "public")
    reply = app.test_client().post(
        f"/api/v2/workspaces/{workspace['id']}/port-share", json=body, headers=personas["carol"].auth
    )
    assert reply.status_code == 400


def test_a_bad_template_level_is_refused(app: Flask, personas: dict[str, Persona], workspace: dict[str, Any]) -> None:
    reply = app.test_client().patch(
        f"/api/v2/templates/{workspace['template']['id']}", json={"max_port_share_level": "world"},
        headers=personas["bob"].auth,
    )  # fmt: skip
    assert reply.status_code == 400 and reply.json["validations"][0]["field"] == "max_port_share_level"


@pytest.mark.parametrize(
    ("level", "persona", "status"),
    [
        (None, "carol", 502), (None, "alice", 502), (None, "dave", 404), (None, None, 302),
        ("authenticated", "dave", 502), ("authenticated", "bob", 502), ("authenticated", None, 302),
        ("public", None, 502), ("public", "dave", 502),
    ],
)  # fmt: skip
def test_a_shared_port_opens_per_its_level(
    app: Flask,
    personas: dict[str, Persona],
    workspace: dict[str, Any],
    level: str | None,
    persona: str | None,
    status: int,
) -> None:
    if level is not None:
        set_max_level(app, personas, workspace, "public")
        assert share(app, personas["carol"], workspace, level).status_code == 200
    on_path = browser_of(app, persona).get("/@carol/w1.main/apps/8000/").status_code
    assert on_path == status
    assert on_port_host(app, browser_of(app, persona), persona) == status


def test_the_page_shares_a_port(app: Flask, personas: dict[str, Persona], workspace: dict[str, Any]) -> None:
    from app.agents import services

    set_max_level(app, personas, workspace, "authenticated")
    agent = app.test_client().get(f"/api/v2/workspaces/{workspace['id']}", headers=personas["carol"].auth)
    agent_id = agent.json["latest_build"]["resources"][0]["agents"][0]["id"]
    with app.app_context():
        services.mark_connected(agent_id, "connection-1")
    report = {"ports": [{"process_name": "python3", "port": 8000}]}
    headers = {"Slipway-Agent-Token": "4b1deb4d-3b7d-4bad-9bdd-2b0d7b3dcb6d"}
    assert app.test_client().post("/api/v2/workspaceagents/me/listening-ports", json=report, headers=headers)
    carol = browser_of(app, "carol")
    page_path = f"/workspaces/{workspace['id']}"
    page = carol.get(page_path).get_data(as_text=True)
    assert 'value="public"' not in page and "port-share-form" in page  # only the levels the template allows
    done = post_form(
        carol, f"/workspaces/{workspace['id']}/agents/{agent_id}/ports/8000/share", {"share_level": "authenticated"},
        token_from=page_path,
    )  # fmt: skip
    assert done.status_code == 302
    listed = app.test_client().get(f"/api/v2/workspaces/{workspace['id']}/port-share", headers=personas["carol"].auth)
    assert [item["share_level"] for item in listed.json["shares"]] == ["authenticated"]
    done = post_form(
        carol, f"/workspaces/{workspace['id']}/agents/{agent_id}/ports/8000/share", {"share_level": "owner"},
        token_from=page_path,
    )  # fmt: skip
    listed = app.test_client().get(f"/api/v2/workspaces/{workspace['id']}/port-share", headers=personas["carol"].auth)
    assert listed.json["shares"] == []
