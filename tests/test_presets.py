"""Presets (data "coder_workspace_preset"): recorded by the import, checked by the server as Coder checks them,
served by the API, and applied to a workspace's parameters when one is created with a preset."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from app.catalog.models import TemplateVersion
from app.core.extensions import db
from protocol.codec import decode_list
from protocol.publicapi import Preset
from tests.conftest import PASSWORD, Persona
from tests.support.daemon import PARAMETERS, RESOURCES, FakeDaemon, import_template, running_import
from tests.support.web import post_form, sign_in

pytestmark = pytest.mark.databases("sqlite")

EUROPE = {
    "name": "Europe",
    "parameters": [{"name": "region", "value": "eu"}, {"name": "size", "value": "4"}],
    "default": True,
    "description": "Close to the Berlin office",
    "icon": "/icon/eu.svg",
    "desired_prebuild_instances": 2,
}
AMERICA = {"name": "America", "parameters": [{"name": "region", "value": "us"}]}


def _complete_import(client: FlaskClient, personas: dict[str, Persona], presets: list[dict[str, Any]]) -> Any:
    daemon, job_id, version_id = running_import(client, personas)
    result = {"parameters": PARAMETERS, "resources": RESOURCES, "presets": presets}
    assert daemon.call(f"/jobs/{job_id}/complete", {"template_import": result}).status_code == 204
    job = client.get(f"/api/v2/templateversions/{version_id}", headers=personas["bob"].auth).json["job"]
    return version_id, job


def test_the_import_records_the_version_presets(app: Flask, client: FlaskClient, personas: dict[str, Persona]) -> None:
    version_id, job = _complete_import(client, personas, [EUROPE, AMERICA])
    assert job["status"] == "succeeded", job
    with app.app_context():
        version = db.session.get(TemplateVersion, version_id)
        assert version is not None
        unset = {"prebuild_ttl_seconds": None, "prebuild_scheduling": None}
        assert [preset.to_json() for preset in version.presets] == [
            {**EUROPE, **unset},
            {**AMERICA, "default": False, "description": "", "icon": "", "desired_prebuild_instances": None, **unset},
        ]


def test_an_older_daemon_reports_no_presets(app: Flask, client: FlaskClient, personas: dict[str, Persona]) -> None:
    template = import_template(client, personas, FakeDaemon(client))
    with app.app_context():
        version = db.session.get(TemplateVersion, template["active_version_id"])
        assert version is not None and version.presets == ()


def test_a_preset_may_set_only_declared_parameters(client: FlaskClient, personas: dict[str, Persona]) -> None:
    stray = {"name": "Big", "parameters": [{"name": "region", "value": "eu"}, {"name": "cpus", "value": "8"}]}
    _, job = _complete_import(client, personas, [stray])
    assert job["status"] == "failed"
    assert "Preset 'Big' sets parameter 'cpus', which the template does not declare" in job["error"]


def test_at_most_one_preset_is_the_default(client: FlaskClient, personas: dict[str, Persona]) -> None:
    _, job = _complete_import(client, personas, [EUROPE, {**AMERICA, "default": True}])
    assert job["status"] == "failed"
    assert "At most one coder_workspace_preset can be the default, but 2 are: Europe, America." in job["error"]


def test_preset_names_are_unique(client: FlaskClient, personas: dict[str, Persona]) -> None:
    _, job = _complete_import(client, personas, [AMERICA, {**AMERICA, "description": "again"}])
    assert job["status"] == "failed"
    assert "coder_workspace_preset names must be unique, but 'America' appears twice." in job["error"]


def test_the_api_lists_presets_as_coder_does(client: FlaskClient, personas: dict[str, Persona]) -> None:
    template = import_template(client, personas, FakeDaemon(client), presets=[EUROPE, AMERICA])
    url = f"/api/v2/templateversions/{template['active_version_id']}/presets"

    listed = client.get(url, headers=personas["carol"].auth)  # a member, who builds from the template

    assert listed.status_code == 200, listed.json
    europe, america = decode_list(Preset, listed.json)
    assert listed.json[0] == {
        "ID": europe.ID,
        "Name": "Europe",
        "Parameters": [{"Name": "region", "Value": "eu"}, {"Name": "size", "Value": "4"}],
        "Default": True,
        "Description": "Close to the Berlin office",
        "Icon": "/icon/eu.svg",
        "DesiredPrebuildInstances": 2,
    }
    assert (america.Name, america.Default, america.DesiredPrebuildInstances) == ("America", False, None)
    assert str(uuid.UUID(europe.ID)) == europe.ID != america.ID
    assert client.get(url, headers=personas["bob"].auth).json == listed.json  # the same ids every time


def test_presets_need_a_signed_in_caller_and_a_real_version(client: FlaskClient, personas: dict[str, Persona]) -> None:
    template = import_template(client, personas, FakeDaemon(client), presets=[EUROPE])
    assert client.get(f"/api/v2/templateversions/{template['active_version_id']}/presets").status_code == 401
    missing = client.get(f"/api/v2/templateversions/{uuid.uuid4()}/presets", headers=personas["carol"].auth)
    assert missing.status_code == 404 and "No such template version" in missing.json["message"]


BIGGER = {"name": "Bigger", "parameters": [{"name": "size", "value": "6"}]}


def _preset_ids(client: FlaskClient, persona: Persona, template: dict[str, Any]) -> dict[str, str]:
    listed = client.get(f"/api/v2/templateversions/{template['active_version_id']}/presets", headers=persona.auth)
    return {preset["Name"]: preset["ID"] for preset in listed.json}


def _build_values(client: FlaskClient, persona: Persona, build_id: str) -> dict[str, str]:
    values = client.get(f"/api/v2/workspacebuilds/{build_id}/parameters", headers=persona.auth).json
    return {item["name"]: item["value"] for item in values}


def test_creating_with_a_preset_applies_its_values_over_the_persons(
    client: FlaskClient, personas: dict[str, Persona]
) -> None:
    carol = personas["carol"]
    template = import_template(client, personas, FakeDaemon(client), presets=[EUROPE, AMERICA])
    ids = _preset_ids(client, carol, template)

    # America sets the region only: carol's size stays, her region gives way to the preset's.
    given = [{"name": "region", "value": "eu"}, {"name": "size", "value": "3"}]
    body = {"template_id": template["id"], "name": "west", "rich_parameter_values": given}
    created = client.post(
        "/api/v2/workspaces", json={**body, "template_version_preset_id": ids["America"]}, headers=carol.auth
    )

    assert created.status_code == 201, created.json
    assert _build_values(client, carol, created.json["latest_build"]["id"]) == {"region": "us", "size": "3"}
    # The build says which preset made it; one made without a preset says none.
    assert created.json["latest_build"]["template_version_preset_id"] == ids["America"]
    plain = client.post("/api/v2/workspaces", json={**body, "name": "plain"}, headers=carol.auth)
    assert plain.status_code == 201 and plain.json["latest_build"]["template_version_preset_id"] is None
    sign_in(client, "carol@example.com", PASSWORD)
    page = client.get(f"/workspaces/{created.json['id']}").get_data(as_text=True)
    assert '<span class="muted">preset America</span>' in page
    plain_page = client.get(f"/workspaces/{plain.json['id']}").get_data(as_text=True)
    assert "preset " not in plain_page.split("build-timeline")[1]


def test_an_unknown_preset_is_refused_naming_the_field(client: FlaskClient, personas: dict[str, Persona]) -> None:
    carol = personas["carol"]
    template = import_template(client, personas, FakeDaemon(client), presets=[EUROPE])
    body = {"template_id": template["id"], "name": "ws", "template_version_preset_id": str(uuid.uuid4())}

    refused = client.post("/api/v2/workspaces", json=body, headers=carol.auth)

    assert refused.status_code == 400
    assert "has no preset with id" in refused.json["message"] and "(its presets: Europe)" in refused.json["message"]
    assert refused.json["validations"][0]["field"] == "template_version_preset_id"
    assert client.get("/api/v2/workspaces", headers=carol.auth).json == []


def test_a_start_build_can_take_a_preset_too(client: FlaskClient, personas: dict[str, Persona]) -> None:
    carol, daemon = personas["carol"], FakeDaemon(client)
    template = import_template(client, personas, daemon, presets=[AMERICA, BIGGER])
    ids = _preset_ids(client, carol, template)
    body = {"template_id": template["id"], "name": "ws", "template_version_preset_id": ids["America"]}
    workspace = client.post("/api/v2/workspaces", json=body, headers=carol.auth).json
    job_id = workspace["latest_build"]["job"]["id"]
    assert daemon.call(f"/jobs/{job_id}/acquire").status_code == 200
    assert daemon.call(f"/jobs/{job_id}/complete", {"workspace_build": {"resources": []}}).status_code == 204

    body = {"transition": "start", "template_version_preset_id": ids["Bigger"]}
    build = client.post(f"/api/v2/workspaces/{workspace['id']}/builds", json=body, headers=carol.auth)

    assert build.status_code == 201, build.json
    assert _build_values(client, carol, build.json["id"]) == {"region": "us", "size": "6"}


def test_the_create_form_offers_presets_and_applies_the_chosen_one(
    app: Flask, client: FlaskClient, personas: dict[str, Persona]
) -> None:
    api = app.test_client()
    template = import_template(api, personas, FakeDaemon(api), presets=[EUROPE, AMERICA])
    ids = _preset_ids(api, personas["carol"], template)
    sign_in(client, "carol@example.com", PASSWORD)

    form = client.get("/workspaces/new?template=dev").get_data(as_text=True)
    assert '<select name="preset" data-preset-select>' in form
    assert f'<option value="{ids["Europe"]}" data-parameters=\'{{"region": "eu", "size": "4"}}\'' in form
    assert 'data-name="Europe" selected>Europe (default)</option>' in form  # the default, chosen for you
    assert "<strong>America</strong>: region = us" in form
    assert 'data-preset-param="region" disabled' in form and form.count("Set by preset Europe.") == 2

    given = {"template": "dev", "param.region": "eu", "param.size": "3"}
    page = "/workspaces/new?template=dev"
    chose = post_form(client, "/workspaces/new", {**given, "name": "west", "preset": ids["America"]}, token_from=page)
    assert chose.status_code == 302, chose.get_data(as_text=True)
    none = post_form(client, "/workspaces/new", {**given, "name": "mine", "preset": ""}, token_from=page)
    assert none.status_code == 302, none.get_data(as_text=True)
    made = {w["name"]: w for w in api.get("/api/v2/workspaces", headers=personas["carol"].auth).json}
    assert _build_values(api, personas["carol"], made["west"]["latest_build"]["id"]) == {"region": "us", "size": "3"}
    assert _build_values(api, personas["carol"], made["mine"]["latest_build"]["id"]) == {"region": "eu", "size": "3"}

    bogus = post_form(client, "/workspaces/new", {**given, "name": "odd", "preset": "nope"}, token_from=page)
    text = bogus.get_data(as_text=True)
    assert bogus.status_code == 400 and "No such preset in this template version." in text
    assert 'value="odd"' in text  # what was typed is kept


def test_a_template_without_presets_shows_no_preset_choice(
    app: Flask, client: FlaskClient, personas: dict[str, Persona]
) -> None:
    api = app.test_client()
    import_template(api, personas, FakeDaemon(api))
    sign_in(client, "carol@example.com", PASSWORD)
    form = client.get("/workspaces/new?template=dev").get_data(as_text=True)
    assert 'name="preset"' not in form and "Set by preset" not in form and "data-preset-param" not in form


def test_a_preset_value_must_pass_its_parameters_rules(client: FlaskClient, personas: dict[str, Persona]) -> None:
    mars = {"name": "Mars", "parameters": [{"name": "region", "value": "mars"}]}
    _, job = _complete_import(client, personas, [mars])
    assert job["status"] == "failed"
    assert "Preset 'Mars' sets parameter 'region' to 'mars': " in job["error"]
    assert "must be defined as one of options" in job["error"]


def test_an_import_whose_healthcheck_expects_no_readable_status_fails(
    client: FlaskClient, personas: dict[str, Persona]
) -> None:
    """Not a preset, but checked at the same step: a healthcheck the agent could never pass is refused with why."""
    daemon, job_id, version_id = running_import(client, personas)
    app = {"slug": "web", "url": "http://localhost:8080", "healthcheck": {"url": "http://localhost:8080/#expect=2x"}}
    agent = {"name": "main", "os": "linux", "arch": "amd64", "token": "t0k", "apps": [app]}
    resources = {"start": [{"name": "dev", "type": "terraform_data", "agents": [agent]}], "stop": []}
    result = {"parameters": PARAMETERS, "resources": resources}
    assert daemon.call(f"/jobs/{job_id}/complete", {"template_import": result}).status_code == 204
    job = client.get(f"/api/v2/templateversions/{version_id}", headers=personas["bob"].auth).json["job"]
    assert job["status"] == "failed"
    assert "App 'web': the healthcheck URL's #expect= has '2x'" in job["error"]
