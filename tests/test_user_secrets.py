"""People's secrets (Coder's user secrets): the API, their encryption at rest, and their way into the owner's builds."""

from __future__ import annotations

import pytest
from flask import Flask
from sqlalchemy import text

from app.core.extensions import db
from protocol.usersecrets import secret_env_variable, secret_file_variable
from tests.conftest import Persona
from tests.support.daemon import FakeDaemon, import_template
from tests.support.web import post_form, sign_in

pytestmark = pytest.mark.databases("sqlite", "postgresql")

SECRETS = "/api/v2/users/me/secrets"


def test_a_person_creates_lists_updates_and_deletes_a_secret_whose_value_never_comes_back(
    app: Flask, personas: dict[str, Persona]
) -> None:
    api, carol = app.test_client(), personas["carol"]
    body = {"name": "gh", "value": "ghp-very-secret-1", "env_name": "GITHUB_TOKEN", "description": "For git"}
    created = api.post(SECRETS, json=body, headers=carol.auth)
    assert created.status_code == 201, created.json
    assert created.json["name"] == "gh" and created.json["env_name"] == "GITHUB_TOKEN"
    assert created.json["file_path"] == "" and created.json["description"] == "For git"
    # By id and by username as well as "me".
    for who in ("me", carol.id, carol.username):
        listed = api.get(f"/api/v2/users/{who}/secrets", headers=carol.auth)
        assert listed.status_code == 200
        assert [row["name"] for row in listed.json] == ["gh"] and listed.headers["X-Total-Count"] == "1"
    # Paged like every list.
    api.post(SECRETS, json={"name": "aws", "value": "aws-very-secret"}, headers=carol.auth)
    first = api.get(f"{SECRETS}?limit=1", headers=carol.auth)
    assert [row["name"] for row in first.json] == ["aws"] and first.headers["X-Total-Count"] == "2"
    assert [row["name"] for row in api.get(f"{SECRETS}?limit=1&offset=1", headers=carol.auth).json] == ["gh"]
    api.delete(f"{SECRETS}/aws", headers=carol.auth)
    changed = api.patch(
        f"{SECRETS}/gh", json={"value": "ghp-very-secret-2", "file_path": "~/.gh", "env_name": ""}, headers=carol.auth
    )
    assert changed.status_code == 200, changed.json
    assert changed.json["env_name"] == "" and changed.json["file_path"] == "~/.gh"
    one = api.get(f"{SECRETS}/gh", headers=carol.auth)
    assert one.status_code == 200 and one.json["description"] == "For git"
    for reply in (created, listed, changed, one):
        assert "ghp-very-secret" not in reply.get_data(as_text=True) and "value" not in reply.get_data(as_text=True)
    # Encrypted at rest: the raw column holds neither value.
    with app.app_context():
        raw = db.session.execute(text("SELECT value FROM user_secrets")).scalar_one()
    assert b"ghp-very-secret" not in bytes(raw) and bytes(raw).startswith(b"enc1:")
    assert api.delete(f"{SECRETS}/gh", headers=carol.auth).status_code == 204
    assert api.get(f"{SECRETS}/gh", headers=carol.auth).status_code == 404
    assert api.delete(f"{SECRETS}/gh", headers=carol.auth).status_code == 404


def test_every_invalid_field_is_reported_at_once(app: Flask, personas: dict[str, Persona]) -> None:
    api, carol = app.test_client(), personas["carol"]
    body = {"name": "no spaces", "env_name": "1BAD", "file_path": "relative/path", "description": "x" * 2000}
    refused = api.post(SECRETS, json=body, headers=carol.auth)
    assert refused.status_code == 400
    assert sorted(item["field"] for item in refused.json["validations"]) == [
        "description",
        "env_name",
        "file_path",
        "name",
        "value",
    ]
    assert api.post(SECRETS, json={"name": "a" * 65, "value": "v"}, headers=carol.auth).status_code == 400
    assert api.post(SECRETS, json={"name": "ok", "value": 3}, headers=carol.auth).status_code == 400
    bad_patch = api.patch(f"{SECRETS}/missing", json={"env_name": "no-dash"}, headers=carol.auth)
    assert bad_patch.status_code == 400 and bad_patch.json["validations"][0]["field"] == "env_name"
    assert api.post(SECRETS, data="not json", headers=carol.auth).status_code == 400


def test_names_variables_and_files_are_unique_per_person_only(app: Flask, personas: dict[str, Persona]) -> None:
    api, carol, dave = app.test_client(), personas["carol"], personas["dave"]
    first = {"name": "a", "value": "1", "env_name": "A", "file_path": "/a"}
    assert api.post(SECRETS, json=first, headers=carol.auth).status_code == 201
    for clash, word in (
        ({"name": "a", "value": "2"}, "named 'a'"),
        ({"name": "b", "value": "2", "env_name": "A"}, "variable A"),
        ({"name": "c", "value": "2", "file_path": "/a"}, "file /a"),
    ):
        reply = api.post(SECRETS, json=clash, headers=carol.auth)
        assert reply.status_code == 409 and word in reply.json["message"], reply.json
    # Neither a variable nor a file: just stored, and several such may exist.
    assert api.post(SECRETS, json={"name": "plain1", "value": "x"}, headers=carol.auth).status_code == 201
    assert api.post(SECRETS, json={"name": "plain2", "value": "x"}, headers=carol.auth).status_code == 201
    assert api.patch(f"{SECRETS}/plain1", json={"env_name": "A"}, headers=carol.auth).status_code == 409
    assert api.post(SECRETS, json=first, headers=dave.auth).status_code == 201


def test_nobody_reaches_another_persons_secrets(app: Flask, personas: dict[str, Persona]) -> None:
    api, alice, carol = app.test_client(), personas["alice"], personas["carol"]
    assert api.post(SECRETS, json={"name": "gh", "value": "v"}, headers=carol.auth).status_code == 201
    for who in (carol.id, carol.username):
        assert api.get(f"/api/v2/users/{who}/secrets", headers=alice.auth).status_code == 403
        assert api.get(f"/api/v2/users/{who}/secrets/gh", headers=alice.auth).status_code == 403
        assert api.delete(f"/api/v2/users/{who}/secrets/gh", headers=alice.auth).status_code == 403
    assert api.get(SECRETS, headers=alice.auth).json == []
    assert api.get(f"{SECRETS}/gh", headers=alice.auth).status_code == 404


def test_a_build_gets_its_owners_secrets_only_and_their_values_are_masked_in_its_log(
    app: Flask, personas: dict[str, Persona]
) -> None:
    api = app.test_client()
    daemon = FakeDaemon(api)
    declared = [{"env": "GITHUB_TOKEN"}, {"file": "~/.config/gh"}]
    template = import_template(api, personas, daemon, secrets=declared)
    carol, dave = personas["carol"], personas["dave"]
    mine = {"name": "gh", "value": "carol-gh-token-123", "env_name": "GITHUB_TOKEN", "file_path": "~/.config/gh"}
    assert api.post(SECRETS, json=mine, headers=carol.auth).status_code == 201
    assert api.post(SECRETS, json={"name": "plain", "value": "carol-plain-456"}, headers=carol.auth).status_code == 201
    theirs = {"name": "gh", "value": "dave-gh-token-789", "env_name": "GITHUB_TOKEN"}
    assert api.post(SECRETS, json=theirs, headers=dave.auth).status_code == 201
    body = {"template_id": template["id"], "name": "w1", "rich_parameter_values": [{"name": "region", "value": "eu"}]}
    created = api.post("/api/v2/workspaces", json=body, headers=carol.auth)
    assert created.status_code == 201, created.json
    job_id = created.json["latest_build"]["job"]["id"]
    acquired = daemon.call(f"/jobs/{job_id}/acquire")
    assert acquired.json["workspace_build"]["secret_env"] == {
        secret_env_variable("GITHUB_TOKEN"): "carol-gh-token-123",
        secret_file_variable("~/.config/gh"): "carol-gh-token-123",
    }
    with app.app_context():
        rows = db.session.execute(text("SELECT * FROM provisioner_jobs")).all()
    assert all("carol-gh-token-123" not in repr(row) for row in rows)
    output = "token carol-gh-token-123 and carol-plain-456 but not dave-gh-token-789"
    daemon.call(f"/jobs/{job_id}/logs", {"logs": [{"stage": "Apply", "output": output}]})
    logs = api.get(f"/api/v2/workspacebuilds/{created.json['latest_build']['id']}/logs", headers=carol.auth)
    text_out = logs.get_data(as_text=True)
    assert "carol-gh-token-123" not in text_out and "carol-plain-456" not in text_out
    assert "token " in text_out and "dave-gh-token-789" in text_out


def test_a_build_gets_only_the_secrets_its_template_declares(app: Flask, personas: dict[str, Persona]) -> None:
    """A template admin cannot read members' secrets by their names without naming them in the template: the
    build's environment holds only the declared ones (a version imported before declarations were recorded keeps
    getting them all until it is pushed again)."""
    api = app.test_client()
    daemon = FakeDaemon(api)
    template = import_template(api, personas, daemon, secrets=[{"env": "GITHUB_TOKEN"}])
    carol = personas["carol"]
    for name, env_name, file_path in (("gh", "GITHUB_TOKEN", "~/.config/gh"), ("aws", "AWS_SECRET_KEY", None)):
        body = {"name": name, "value": f"carol-{name}-value", "env_name": env_name, "file_path": file_path}
        assert api.post(SECRETS, json=body, headers=carol.auth).status_code == 201

    def secret_env(workspace: str) -> dict[str, str]:
        body = {
            "template_id": template["id"],
            "name": workspace,
            "rich_parameter_values": [{"name": "region", "value": "eu"}],
        }
        created = api.post("/api/v2/workspaces", json=body, headers=carol.auth)
        assert created.status_code == 201, created.json
        acquired = daemon.call(f"/jobs/{created.json['latest_build']['job']['id']}/acquire")
        assert acquired.status_code == 200, acquired.json
        return dict(acquired.json["workspace_build"]["secret_env"])

    assert secret_env("w1") == {secret_env_variable("GITHUB_TOKEN"): "carol-gh-value"}
    with app.app_context():
        db.session.execute(text("UPDATE template_versions SET secrets = NULL"))
        db.session.commit()
    assert secret_env("w2") == {
        secret_env_variable("GITHUB_TOKEN"): "carol-gh-value",
        secret_file_variable("~/.config/gh"): "carol-gh-value",
        secret_env_variable("AWS_SECRET_KEY"): "carol-aws-value",
    }


def test_the_account_page_adds_lists_and_deletes_secrets_and_marks_every_invalid_field(
    app: Flask, personas: dict[str, Persona]
) -> None:
    browser, carol = app.test_client(), personas["carol"]
    sign_in(browser, carol.email, carol.password)
    page = browser.get("/account")
    assert page.status_code == 200 and 'id="secrets"' in page.text and "No secrets." in page.text
    typed = {"name": "bad name", "value": "typed-value-999", "env_name": "9X", "file_path": "rel"}
    typed["description"] = "kept"
    refused = post_form(browser, "/account/secrets", typed, token_from="/account")
    assert refused.status_code == 400
    for field in ("name", "env_name", "file_path"):
        assert f'id="secret-{field}-error"' in refused.text, field
    assert 'id="secret-value-error"' not in refused.text and 'id="secret-description-error"' not in refused.text
    assert 'value="bad name"' in refused.text and 'value="9X"' in refused.text and 'value="kept"' in refused.text
    assert "typed-value-999" not in refused.text
    no_value = post_form(browser, "/account/secrets", {**typed, "value": ""}, token_from="/account")
    assert no_value.status_code == 400 and 'id="secret-value-error"' in no_value.text
    good = {"name": "gh", "value": "typed-value-999", "env_name": "GITHUB_TOKEN", "file_path": "", "description": "x"}
    saved = post_form(browser, "/account/secrets", good, token_from="/account")
    assert saved.status_code == 302 and saved.headers["Location"].endswith("/account#secrets")
    page = browser.get("/account")
    assert 'data-secret="gh"' in page.text and "$GITHUB_TOKEN" in page.text and "typed-value-999" not in page.text
    assert 'data-confirm="Delete the secret gh?' in page.text
    clash = post_form(browser, "/account/secrets", good, token_from="/account")
    assert clash.status_code == 409 and "already have a secret named" in clash.text
    assert browser.post("/account/secrets/gh/delete").status_code == 400  # no CSRF token
    deleted = post_form(browser, "/account/secrets/gh/delete", {}, token_from="/account")
    assert deleted.status_code == 302
    assert 'data-secret="gh"' not in browser.get("/account").text
    with app.app_context():
        assert db.session.execute(text("SELECT count(*) FROM user_secrets")).scalar_one() == 0
