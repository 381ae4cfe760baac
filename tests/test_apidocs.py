"""The OpenAPI document (app/apidocs) covers exactly the API's routes, is valid OpenAPI 3.1, is served to anyone
with its reference page, and the check that holds every answer of the suite to it (tests/support/openapi.py) bites."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from flask import Flask, Response
from flask.testing import FlaskClient
from openapi_spec_validator import validate

from app.apidocs import contract
from app.apidocs.document import api_rules, methods_of, openapi_document, openapi_path, request_message
from protocol.agentapi import AgentLogBatch
from tests.conftest import PASSWORD, Persona
from tests.support.openapi import CHECKS, ContractBroken
from tests.support.web import sign_in

pytestmark = pytest.mark.databases("sqlite")


def test_every_api_route_is_in_the_document_and_nothing_else(app: Flask) -> None:
    document = openapi_document(app)
    routes = {(openapi_path(rule.rule), method.lower()) for rule in api_rules(app) for method in methods_of(rule)}
    documented = {(path, method) for path, item in document["paths"].items() for method in item}
    assert routes == documented
    assert len(routes) > 140  # the whole API, not a part of it
    operation = document["paths"]["/api/v2/workspaces/{workspace_id}/builds"]["post"]
    assert operation["tags"] == ["workspaces"]
    assert operation["parameters"] == [
        {"name": "workspace_id", "in": "path", "required": True, "schema": {"type": "string"}}
    ]
    assert operation["security"] == [{"BearerToken": []}, {"SessionTokenHeader": []}]
    assert operation["responses"]["201"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/WorkspaceBuild"
    }


def test_the_contract_table_names_only_real_endpoints(app: Flask) -> None:
    endpoints = {rule.endpoint for rule in api_rules(app)}
    assert set(contract.REPLIES) | set(contract.OTHER_CONTENT) | contract.STREAMS <= endpoints
    assert set(contract.OWN_CREDENTIALS) <= endpoints


def test_the_document_is_valid_openapi_3_1(app: Flask) -> None:
    document = openapi_document(app)
    assert document["openapi"] == "3.1.0"
    validate(document)  # raises, naming the place, on anything the 3.1 schema refuses
    # The server may add fields, and readers ignore them: every message says so.
    messages = [schema for name, schema in document["components"]["schemas"].items() if name != "Untyped"]
    assert messages and all(schema["additionalProperties"] is True for schema in messages)


def test_credentials_requests_and_summaries_come_from_the_code(app: Flask) -> None:
    paths = openapi_document(app)["paths"]
    assert paths["/api/v2/users/login"]["post"]["security"] == []  # public: api_blueprint(public=...)
    assert paths["/api/v2/provisionerd/register"]["post"]["security"] == [
        {"ProvisionerPSK": []}, {"ProvisionerKey": []}, {"BearerToken": []}, {"SessionTokenHeader": []}
    ]  # fmt: skip
    logs = paths["/api/v2/workspaceagents/me/logs"]["post"]
    assert logs["security"] == [{"AgentToken": []}]
    # The view reads message_body(AgentLogBatch): found in its source.
    assert request_message(app.view_functions["agent_api.logs"]) is AgentLogBatch
    assert logs["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/AgentLogBatch"
    }
    # The summary is the docstring's first sentence.
    assert paths["/api/v2/workspacebuilds/{build_id}/plan"]["get"]["summary"].startswith("The plan a build stopped on")
    # A route nobody has typed says so, rather than inventing a shape.
    untyped = paths["/api/v2/insights/daus"]["get"]["responses"]["2XX"]["content"]["application/json"]["schema"]
    assert untyped == {"$ref": "#/components/schemas/Untyped"}


def test_anyone_reads_the_document_and_it_is_built_once(app: Flask, client: FlaskClient) -> None:
    answer = client.get("/api/v2/openapi.json")
    assert answer.status_code == 200 and answer.mimetype == "application/json"
    assert answer.json == json.loads(json.dumps(openapi_document(app)))
    assert openapi_document(app) is openapi_document(app)
    assert answer.headers["Content-Security-Policy"].startswith("default-src 'none'")


def test_the_reference_page_lists_every_operation_with_its_anchor(
    app: Flask, client: FlaskClient, personas: dict[str, Persona]
) -> None:
    document = openapi_document(app)
    for signed_in in (False, True):
        if signed_in:
            sign_in(client, "carol@example.com", PASSWORD)
        page = client.get("/docs/api")
        assert page.status_code == 200, page.status_code
        html = page.get_data(as_text=True)
        for item in document["paths"].values():
            for operation in item.values():
                assert f'id="op-{operation["operationId"]}"' in html
        assert 'id="schema-WorkspaceBuild"' in html and 'href="#schema-WorkspaceBuild"' in html
        assert 'id="tag-workspaces"' in html
        assert not re.search(r"<script(?![^>]*\bsrc=)|\sstyle=|<style", html)  # nothing inline (the CSP allows none)
    assert 'class="whoami"' in html  # the signed-in visit shows the dashboard's top bar
    account = client.get("/account").get_data(as_text=True)
    assert 'href="/docs/api"' in account


def test_a_reply_that_strays_from_the_document_fails_the_test_that_got_it(app: Flask) -> None:
    with app.test_request_context("/api/v2/users/me"):
        with pytest.raises(ContractBroken, match=r"GET /api/v2/users/me answered 200 .*: data.id must be string"):
            app.process_response(Response('{"id": 5, "username": "carol"}', mimetype="application/json"))
        # A status the operation does not list is a mismatch too.
        with pytest.raises(ContractBroken, match="does not list"):
            app.process_response(Response("{}", status=201, mimetype="application/json"))
        # Errors must be the project's error body.
        with pytest.raises(ContractBroken, match="data.message must be string"):
            app.process_response(Response('{"message": 3}', status=404, mimetype="application/json"))
        app.process_response(Response('{"id": "u", "username": "carol", "new": 1}', mimetype="application/json"))


def test_checking_a_reply_costs_little(client: FlaskClient, personas: dict[str, Persona]) -> None:
    carol = personas["carol"]
    assert client.get("/api/v2/users/me", headers=carol.auth).status_code == 200  # the validator is built
    count, seconds = CHECKS.count, CHECKS.seconds
    for _ in range(50):
        client.get("/api/v2/users/me", headers=carol.auth)
        client.get("/api/v2/workspaces/nope", headers=carol.auth)  # a 404 error body
    each = (CHECKS.seconds - seconds) / (CHECKS.count - count)
    print(f"a reply's check: {each * 1e6:.0f} µs")
    assert CHECKS.count - count == 100
    # A bound for the slowest machine, far above the ~40 µs it takes: a regression would be milliseconds.
    assert each < 0.005


README = Path(__file__).resolve().parent.parent / "README.md"
PROMISED_CALL = re.compile(r"`(GET|POST|PUT|PATCH|DELETE) (/api/v2/[^`\s?\[]*)")


def test_every_call_the_readme_promises_is_in_the_document(app: Flask) -> None:
    """README's "The API" carries over what ../shared/API.md promised: each call it names is a route still."""
    text = README.read_text()
    section = text[text.index("\n## The API\n") : text.index("\n## Lists in the API\n")]
    promised = {(method.lower(), re.sub(r"\{[^}]*\}", "{}", path)) for method, path in PROMISED_CALL.findall(section)}
    paths = openapi_document(app)["paths"]
    documented = {(method, re.sub(r"\{[^}]*\}", "{}", path)) for path, item in paths.items() for method in item}
    assert len(promised) > 50
    assert promised - documented == set()


def test_a_body_the_server_accepts_against_its_request_schema_fails_the_test(app: Flask) -> None:
    """The typed request messages of calls the server reads by hand (contract.REQUESTS) are held to what it takes."""
    body = '{"email": "carol@example.com", "password": 7}'
    with app.test_request_context("/api/v2/users/login", method="POST", data=body):
        with pytest.raises(ContractBroken, match="accepted a body .*: data.password must be string"):
            app.process_response(Response('{"session_token": "t"}', status=201, mimetype="application/json"))
