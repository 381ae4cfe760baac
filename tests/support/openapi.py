"""Every JSON answer of an /api/v2 call that the in-process suite gets is checked against the OpenAPI document
(app/apidocs): the document is the API's contract, so a reply that strays from it fails the test that got it.

tests/conftest.py's ``app`` fixture turns this on. Checks are compiled once per schema and the document
once per process, so a check costs a few dozen microseconds (tests/test_apidocs.py measures it)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import fastjsonschema
from flask import Flask, Response, request

from app.apidocs.document import openapi_document, openapi_path

ENABLED = "SLIPWAY_CHECK_API_REPLIES"
SCHEMAS = "#/components/schemas/"
UNTYPED = SCHEMAS + "Untyped"


# A compiled schema: returns the body, or raises fastjsonschema.JsonSchemaValueException naming what is wrong.
Check = Callable[[Any], Any]


class ContractBroken(AssertionError):
    """A reply that does not match the OpenAPI document."""


@dataclass
class Checks:
    count: int = 0
    seconds: float = 0.0
    validators: dict[tuple[str, str, int], Check | None] = field(default_factory=dict)
    compiled: dict[str, Check] = field(default_factory=dict)
    # Built from the first app that needs it: every app of the suite has the same routes.
    document: dict[str, Any] | None = None


# Per process: the whole suite's cost, for tests/test_apidocs.py to report.
CHECKS = Checks()


def check_api_replies(app: Flask) -> None:
    app.config[ENABLED] = True

    @app.after_request
    def check_reply(response: Response) -> Response:
        if app.config.get(ENABLED) and request.path.startswith("/api/v2/") and response.mimetype == "application/json":
            started = time.perf_counter()
            try:
                _check(app, response)
            finally:
                CHECKS.count += 1
                CHECKS.seconds += time.perf_counter() - started
        return response


def _check(app: Flask, response: Response) -> None:
    rule, method, status = request.url_rule, request.method, response.status_code
    if method in ("HEAD", "OPTIONS") or response.is_streamed or response.direct_passthrough:
        return
    if rule is not None and 200 <= status < 300 and request.content_length:
        _check_request(app, rule.rule, method)
    endpoint = rule.endpoint if rule is not None else ""
    key = (endpoint, method, status)
    if key not in CHECKS.validators:
        CHECKS.validators[key] = _validator(app, rule.rule if rule is not None else "", method, status)
    validator = CHECKS.validators[key]
    if validator is None:
        return
    body = json.loads(response.get_data())
    try:
        validator(body)
    except fastjsonschema.JsonSchemaValueException as error:
        raise ContractBroken(
            f"{method} {request.path} answered {status} against the OpenAPI document (app/apidocs/contract.py): "
            f"{error.message}\nbody: {json.dumps(body)[:2000]}"
        ) from None


def _check_request(app: Flask, rule: str, method: str) -> None:
    """A body the server accepted must be one its typed request message allows (contract.REQUESTS, message_body)."""
    key = (rule, method, 0)
    if key not in CHECKS.validators:
        operation = _document(app)["paths"][openapi_path(rule)][method.lower()]
        content = operation.get("requestBody", {}).get("content", {}).get("application/json", {})
        schema = content.get("schema", {"$ref": UNTYPED})
        CHECKS.validators[key] = None if schema == {"$ref": UNTYPED} else _compile(app, schema)
    validator = CHECKS.validators[key]
    if validator is None:
        return
    try:
        body = json.loads(request.get_data(cache=True))
    except ValueError:
        return  # not JSON (a raw upload), and refused or not by the view itself
    try:
        validator(body)
    except fastjsonschema.JsonSchemaValueException as error:
        raise ContractBroken(
            f"{method} {request.path} accepted a body its OpenAPI request schema refuses: {error.message}"
            f"\nbody: {json.dumps(body)[:2000]}"
        ) from None


def _document(app: Flask) -> dict[str, Any]:
    if CHECKS.document is None:
        CHECKS.document = openapi_document(app)
    return CHECKS.document


def _compile(app: Flask, schema: dict[str, Any]) -> Check:
    """Compiled to Python once per schema (many calls answer the same one), with the named schemas it reaches riding
    along so that "#/components/schemas/X" resolves within it. fastjsonschema checks in tens of microseconds where
    jsonschema took a millisecond; it speaks draft 7, which means the same as 2020-12 for every keyword we write."""
    key = json.dumps(schema, sort_keys=True)
    compiled = CHECKS.compiled.get(key)
    if compiled is None:
        named = _reachable(schema, _document(app)["components"]["schemas"], {})
        compiled = CHECKS.compiled[key] = fastjsonschema.compile(
            {**schema, "components": {"schemas": named}}, use_default=False
        )
    return compiled


def _reachable(schema: object, schemas: dict[str, Any], found: dict[str, Any]) -> dict[str, Any]:
    if isinstance(schema, dict):
        ref = schema.get("$ref")
        if isinstance(ref, str) and ref.startswith(SCHEMAS):
            name = ref.removeprefix(SCHEMAS)
            if name not in found:
                found[name] = schemas[name]
                _reachable(schemas[name], schemas, found)
        for value in schema.values():
            _reachable(value, schemas, found)
    elif isinstance(schema, list):
        for value in schema:
            _reachable(value, schemas, found)
    return found


def _validator(app: Flask, rule: str, method: str, status: int) -> Check | None:
    document = _document(app)
    if not rule:  # no route matched: a 404 or 405 of the API, which must be an error body like any other
        schema: dict[str, Any] = _error_schema(document)
    else:
        operation = document["paths"][openapi_path(rule)][method.lower()]
        responses = operation["responses"]
        answer = responses.get(str(status)) or responses.get(f"{str(status)[0]}XX")
        if answer is None:
            raise ContractBroken(
                f"{method} {rule} answered {status}, which its OpenAPI operation does not list "
                f"(it lists {', '.join(responses)}): app/apidocs/contract.py"
            )
        if "$ref" in answer:
            schema = _error_schema(document)
        else:
            content = answer.get("content", {}).get("application/json")
            if content is None:
                raise ContractBroken(f"{method} {rule} answered {status} with JSON, where the document says no body")
            schema = content["schema"]
    if schema == {"$ref": UNTYPED}:
        return None
    return _compile(app, schema)


def _error_schema(document: dict[str, Any]) -> dict[str, Any]:
    schema: dict[str, Any] = document["components"]["responses"]["Error"]["content"]["application/json"]["schema"]
    return schema
