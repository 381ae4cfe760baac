"""A person's secrets are capped in number and total size, with a clear error (issue 34, M2): each value reaches
every build's environment and its log masking, which a web worker pays for."""

from __future__ import annotations

import pytest
from flask import Flask
from flask.testing import FlaskClient

from app.usersecrets.services import MAX_SECRETS, MAX_TOTAL_VALUE_BYTES, MAX_VALUE_CHARS
from tests.conftest import PASSWORD, Persona
from tests.support.web import post_form, sign_in

pytestmark = pytest.mark.databases("sqlite")

SECRETS = "/api/v2/users/me/secrets"


def test_a_person_keeps_at_most_so_many_secrets(client: FlaskClient, personas: dict[str, Persona]) -> None:
    carol = personas["carol"].auth
    for n in range(MAX_SECRETS):
        assert client.post(SECRETS, json={"name": f"s{n}", "value": f"value-{n}"}, headers=carol).status_code == 201
    refused = client.post(SECRETS, json={"name": "one-more", "value": "value"}, headers=carol)
    assert refused.status_code == 400
    assert refused.json["validations"][0]["field"] == "name"
    assert f"You have {MAX_SECRETS} secrets" in refused.json["message"]
    # Changing one is still allowed, and someone else's count is their own.
    assert client.patch(f"{SECRETS}/s0", json={"value": "changed"}, headers=carol).status_code == 200
    dave = personas["dave"].auth
    assert client.post(SECRETS, json={"name": "one", "value": "value"}, headers=dave).status_code == 201


def test_a_persons_secrets_hold_at_most_so_much_in_all(
    app: Flask, client: FlaskClient, personas: dict[str, Persona]
) -> None:
    carol = personas["carol"].auth
    full = MAX_TOTAL_VALUE_BYTES // MAX_VALUE_CHARS
    for n in range(full):
        body = {"name": f"big{n}", "value": "x" * MAX_VALUE_CHARS}
        assert client.post(SECRETS, json=body, headers=carol).status_code == 201
    refused = client.post(SECRETS, json={"name": "small", "value": "value"}, headers=carol)
    assert refused.status_code == 400 and refused.json["validations"][0]["field"] == "value"
    assert f"at most {MAX_TOTAL_VALUE_BYTES // 1024} KiB" in refused.json["message"]
    # Growing one is refused too; shrinking one makes room.
    grown = client.patch(f"{SECRETS}/big0", json={"value": "é" * MAX_VALUE_CHARS}, headers=carol)
    assert grown.status_code == 400 and grown.json["validations"][0]["field"] == "value"
    assert client.patch(f"{SECRETS}/big0", json={"value": "short"}, headers=carol).status_code == 200
    assert client.post(SECRETS, json={"name": "small", "value": "value"}, headers=carol).status_code == 201
    # The account page's form says so beside the field.
    pages = app.test_client()
    sign_in(pages, "carol@example.com", PASSWORD)
    form = {"name": "another", "value": "y" * MAX_VALUE_CHARS, "description": "", "env_name": "", "file_path": ""}
    page = post_form(pages, "/account/secrets", form, token_from="/account")
    assert page.status_code == 400
    assert f"at most {MAX_TOTAL_VALUE_BYTES // 1024} KiB are allowed" in page.get_data(as_text=True)
