"""Per-person workspace limits (beyond Coder): a template's ``max_workspaces_per_person`` and the deployment's
``--max-workspaces-per-person``, enforced when a workspace is created, with a message that says which limit and
how many the person has, on the API and the dashboard's create form."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from app.core.config import load_settings
from tests.conftest import PASSWORD, Persona
from tests.support.web import post_form, sign_in
from tests.test_workspace_updates import World

pytestmark = pytest.mark.databases("sqlite", "postgresql")

VALUES = [{"name": "region", "value": "eu"}, {"name": "size", "value": "6"}]


class Limits(World):
    def patch(self, body: dict[str, Any]) -> Any:
        path = f"/api/v2/templates/{self.template['id']}"
        return self.client.patch(path, json=body, headers=self.personas["bob"].auth)

    def try_create(self, who: str, name: str) -> Any:
        body = {"template_id": self.template["id"], "name": name, "rich_parameter_values": VALUES}
        return self.client.post("/api/v2/workspaces", json=body, headers=self.personas[who].auth)

    def delete(self, workspace_id: str, name: str, who: str = "carol") -> None:
        path = f"/api/v2/workspaces/{workspace_id}/builds"
        body = {"transition": "delete", "confirm_name": name}
        reply = self.client.post(path, json=body, headers=self.personas[who].auth)
        assert reply.status_code == 201, reply.json
        self.finish(reply.json)


@pytest.fixture
def limits(app: Flask, client: FlaskClient, personas: dict[str, Persona]) -> Limits:
    return Limits(client, personas)


def test_a_template_limit_refuses_the_next_workspace_per_person_until_one_is_deleted(limits: Limits) -> None:
    assert limits.patch({"max_workspaces_per_person": 2}).json["max_workspaces_per_person"] == 2
    first = limits.create(name="one")
    limits.create(name="two")
    refused = limits.try_create("carol", "three")
    assert refused.status_code == 403
    assert refused.json["message"] == (
        f"carol has 2 workspaces of template {limits.template['name']}: it allows at most 2 per person. "
        "Delete one to create another."
    )
    # Per person: dave is not held back by carol's workspaces.
    assert limits.try_create("dave", "three").status_code == 201
    limits.delete(first["id"], "one")
    assert limits.try_create("carol", "three").status_code == 201
    # 0 lifts it.
    limits.patch({"max_workspaces_per_person": 0})
    assert limits.try_create("carol", "four").status_code == 201


def test_the_deployment_limit_counts_every_template(app: Flask, limits: Limits) -> None:
    app.config["SLIPWAY_SETTINGS"] = replace(app.config["SLIPWAY_SETTINGS"], max_workspaces_per_person=1)
    limits.create(name="one")
    refused = limits.try_create("carol", "two")
    assert refused.status_code == 403
    assert refused.json["message"] == (
        "carol has 1 workspace: this deployment allows at most 1 per person. Delete one to create another."
    )


@pytest.mark.parametrize("value", [-1, "2", True, 2**31, None])
def test_bad_limits_are_a_400_naming_the_field(limits: Limits, value: Any) -> None:
    for field in ("max_workspaces_per_person", "prebuild_budget"):
        reply = limits.patch({field: value})
        assert reply.status_code == 400
        assert [item["field"] for item in reply.json["validations"]] == [field]


def test_the_settings_form_sets_the_limit_and_the_create_form_shows_the_refusal(app: Flask, limits: Limits) -> None:
    name = limits.template["name"]
    admin = app.test_client()
    sign_in(admin, "bob@example.com", PASSWORD)
    settings_path = f"/templates/{name}/settings"
    page = admin.get(settings_path).get_data(as_text=True)
    assert 'name="max_workspaces_per_person"' in page and 'name="prebuild_budget"' in page
    bad = post_form(admin, settings_path, {"max_workspaces_per_person": "many", "protect_persistent_resources": "on"})
    assert bad.status_code == 400 and "Enter a whole number (0: no limit)." in bad.get_data(as_text=True)
    saved = post_form(
        admin, settings_path,
        {"max_workspaces_per_person": "1", "prebuild_budget": "30", "protect_persistent_resources": "on"},
    )  # fmt: skip
    assert saved.status_code == 302, saved.get_data(as_text=True)
    template = limits.client.get(f"/api/v2/templates/{limits.template['id']}", headers=limits.personas["bob"].auth)
    assert (template.json["max_workspaces_per_person"], template.json["prebuild_budget"]) == (1, 30)
    limits.create(name="one")
    carol = app.test_client()
    sign_in(carol, "carol@example.com", PASSWORD)
    form = {"template": name, "name": "two", "param.region": "eu", "param.size": "6"}
    refused = post_form(carol, f"/workspaces/new?template={name}", form)
    assert refused.status_code == 403
    assert f"carol has 1 workspace of template {name}: it allows at most 1 per person." in refused.get_data(
        as_text=True
    )


def test_the_deployment_setting_is_read_from_the_environment() -> None:
    assert load_settings({}).max_workspaces_per_person == 0
    assert load_settings({"SLIPWAY_MAX_WORKSPACES_PER_PERSON": "3"}).max_workspaces_per_person == 3
    with pytest.raises(ValueError, match="SLIPWAY_MAX_WORKSPACES_PER_PERSON"):
        load_settings({"SLIPWAY_MAX_WORKSPACES_PER_PERSON": "-1"})
