"""Coder's dynamic parameter form types drawn as their controls on the create form: radio buttons, a multi-select's
checkboxes, a tag list, a textarea, a slider, a switch; what they post is the value the parameter takes (a list's
items as its JSON array), checked by the same rules, and a refused form keeps every choice."""

from __future__ import annotations

import re
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from werkzeug.datastructures import MultiDict

from protocol.parameters import ParameterOption, RichParameter
from tests.conftest import PASSWORD, Persona
from tests.support.daemon import FakeDaemon, import_template
from tests.support.web import csrf_token, sign_in

pytestmark = pytest.mark.databases("sqlite")


def option(value: str) -> dict[str, str]:
    return {"name": value.title(), "value": value}


PARAMETERS: list[dict[str, Any]] = [
    {"name": "editor", "type": "string", "form_type": "radio", "default_value": "code", "required": False,
     "options": [option("code"), option("vim")]},
    {"name": "tools", "display_name": "Tools", "type": "list(string)", "form_type": "multi-select",
     "default_value": '["go"]', "required": False, "options": [option("go"), option("rust"), option("node")]},
    {"name": "labels", "type": "list(string)", "form_type": "tag-select", "default_value": "[]", "required": False},
    {"name": "notes", "type": "string", "form_type": "textarea", "default_value": "", "required": False},
    {"name": "cpus", "type": "number", "form_type": "slider", "default_value": "2", "required": False,
     "validation_min": 1, "validation_max": 8},
    {"name": "gpu", "type": "bool", "form_type": "switch", "default_value": "false", "required": False},
    {"name": "region", "type": "string", "form_type": "dropdown", "default_value": "eu", "required": False,
     "options": [option("eu"), option("us")]},
]  # fmt: skip
FORM = "/workspaces/new?template=forms"


@pytest.fixture
def carol(app: Flask, personas: dict[str, Persona]) -> FlaskClient:
    api = app.test_client()
    import_template(api, personas, FakeDaemon(api), name="forms", parameters=PARAMETERS)
    client = app.test_client()
    sign_in(client, "carol@example.com", PASSWORD)
    return client


def test_each_form_type_is_drawn_as_its_control(carol: FlaskClient) -> None:
    form = carol.get(FORM).get_data(as_text=True)
    assert re.search(r'<fieldset [^>]*id="param-editor" data-control="radio" role="radiogroup">\s*<legend>editor', form)
    assert len(re.findall(r'type="radio" name="param.editor"', form)) == 2
    assert re.search(r'type="radio" name="param.editor" value="code"\s+checked', form)
    assert re.search(r'<fieldset [^>]*id="param-tools" data-control="multi-select">\s*<legend>Tools', form)
    boxes = re.findall(r'type="checkbox" name="param.tools" value="(\w+)"\s+(checked)?', form)
    assert boxes == [("go", "checked"), ("rust", ""), ("node", "")]
    assert re.search(r'<textarea id="param-labels" name="param.labels" rows="3" data-list="lines">\s*</textarea>', form)
    assert '<textarea id="param-notes" name="param.notes" rows="4"' in form
    assert re.search(r'type="range" id="param-cpus" name="param.cpus" min="1" max="8" step="1" value="2"', form)
    assert '<output id="param-cpus-value" for="param-cpus">2</output>' in form
    assert re.search(r'type="checkbox" id="param-gpu" name="param.gpu" value="true" role="switch"', form)
    assert '<select id="param-region" name="param.region">' in form


def post_create(client: FlaskClient, pairs: list[tuple[str, str]]) -> Any:
    """The create form posted with repeated keys (a multi-select's ticked boxes)."""
    body = MultiDict([("csrf_token", csrf_token(client, FORM)), ("template", "forms"), ("name", "ws"), *pairs])
    return client.post("/workspaces/new", data=body)


def test_what_the_controls_post_is_the_value_each_parameter_takes(
    app: Flask, carol: FlaskClient, personas: dict[str, Persona]
) -> None:
    pairs = [("param.editor", "vim"), ("param.tools", "go"), ("param.tools", "node"), ("param.labels", "a\n b \n\n"),
             ("param.notes", "line one\nline two"), ("param.cpus", "4"), ("param.gpu", "true")]  # fmt: skip
    created = post_create(carol, pairs)
    assert created.status_code == 302, created.get_data(as_text=True)
    auth = personas["carol"].auth
    build = carol.get("/api/v2/workspaces", headers=auth).json[0]["latest_build"]
    values = {item["name"]: item["value"] for item in carol.get(f"/api/v2/workspacebuilds/{build['id']}/parameters",
                                                                  headers=auth).json}  # fmt: skip
    assert values == {
        "editor": "vim", "tools": '["go", "node"]', "labels": '["a", "b"]', "notes": "line one\nline two",
        "cpus": "4", "gpu": "true", "region": "eu",
    }  # fmt: skip


def test_a_refused_form_keeps_every_choice_and_marks_the_group(carol: FlaskClient) -> None:
    refused = post_create(carol, [("param.tools", "rust"), ("param.tools", "java"), ("param.cpus", "9")])
    assert refused.status_code == 400
    page = refused.get_data(as_text=True)
    assert re.search(r'<fieldset class="[^"]* invalid-group" id="param-tools" data-control="multi-select">', page)
    boxes = re.findall(r'type="checkbox" name="param.tools" value="(\w+)"\s+(checked)? aria-invalid="true"', page)
    assert boxes == [("go", ""), ("rust", "checked"), ("node", "")]
    assert 'href="#param-tools"' in page and 'href="#param-cpus"' in page  # the summary links to each
    assert re.search(r'type="range" id="param-cpus"[^>]* value="9"', page)


def test_a_form_type_the_type_does_not_take_falls_back_to_its_default() -> None:
    assert RichParameter(type="string", form_type="slider").control == "input"
    assert RichParameter(type="number", form_type="slider").control == "slider"
    assert RichParameter(type="bool").control == "checkbox"
    options = (ParameterOption(name="a", value="a"),)
    assert RichParameter(type="string", options=options).control == "radio"  # Coder's default with options
    assert RichParameter(type="list(string)", options=options, form_type="dropdown").control == "radio"
