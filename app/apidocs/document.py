"""The OpenAPI 3.1 document of the API, built from the application itself: the URL map's /api/v2 rules, the views'
docstrings and ``message_body(X)`` calls, the blueprints' credentials, and the typed messages of protocol/ (through
app/apidocs/contract.py). Built once per process, on first use, when every blueprint is registered."""

from __future__ import annotations

import ast
import functools
import inspect
import re
import textwrap
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from flask import Flask
from werkzeug.routing import Rule

from app.apidocs import contract
from app.apidocs.schemas import Schema, SchemaSet
from app.auth.blueprints import API_PREFIX, TOKEN_BLUEPRINTS
from protocol import agentapi, provisionerd, publicapi
from protocol.codec import Message

EXTENSION = "slipway_openapi"
IGNORED_METHODS = {"HEAD", "OPTIONS"}
UNTYPED = "Untyped"
ERROR = "ErrorBody"
ARGUMENT = re.compile(r"<(?:[^<>:]+:)?([^<>]+)>")
SECURITY_SCHEMES: dict[str, Schema] = {
    "BearerToken": {
        "type": "http",
        "scheme": "bearer",
        "description": "A session token (`POST /api/v2/users/login`) or an API token (`POST /api/v2/users/me/tokens`).",
    },
    "SessionTokenHeader": {
        "type": "apiKey",
        "in": "header",
        "name": "Coder-Session-Token",
        "description": "The same token in Coder's header (`Slipway-Session-Token` is taken too).",
    },
    "SessionCookie": {
        "type": "apiKey",
        "in": "cookie",
        "name": "slipway_session",
        "description": "The dashboard's session (`__Host-slipway_session` over HTTPS): browser pages only.",
    },
    "AgentToken": {
        "type": "apiKey",
        "in": "header",
        "name": agentapi.TOKEN_HEADER,
        "description": "The workspace agent's token (`Coder-Session-Token` is taken too).",
    },
    "ProvisionerPSK": {"type": "apiKey", "in": "header", "name": provisionerd.PSK_HEADER},
    "ProvisionerKey": {"type": "apiKey", "in": "header", "name": provisionerd.KEY_HEADER},
}


def openapi_document(app: Flask) -> dict[str, Any]:
    """The document of ``app``, built on first use and kept for the life of the process (it changes only with
    the code)."""
    document: dict[str, Any] | None = app.extensions.get(EXTENSION)
    if document is None:
        document = app.extensions[EXTENSION] = build_document(app)
    return document


def api_rules(app: Flask) -> list[Rule]:
    return sorted(
        (rule for rule in app.url_map.iter_rules() if rule.rule.startswith(API_PREFIX + "/")),
        key=lambda rule: rule.rule,
    )


def openapi_path(rule: str) -> str:
    """``/api/v2/workspaces/<workspace_id>`` as OpenAPI writes it: ``/api/v2/workspaces/{workspace_id}``."""
    return ARGUMENT.sub(r"{\1}", rule)


def methods_of(rule: Rule) -> list[str]:
    return sorted((rule.methods or set()) - IGNORED_METHODS)


def build_document(app: Flask) -> dict[str, Any]:
    schemas = SchemaSet()
    schemas.schemas[UNTYPED] = {
        "description": "No typed message declares this body yet: any JSON value (README's API section says more)."
    }
    # The public API's messages first, so that they keep their plain names (and all are shown, used or not).
    for value in vars(publicapi).values():
        if isinstance(value, type) and issubclass(value, Message) and value.__module__ == publicapi.__name__:
            schemas.name_of(value)
    paths: dict[str, dict[str, Any]] = {}
    tags: dict[str, str] = {}
    for rule in api_rules(app):
        view = app.view_functions[rule.endpoint]
        tag = feature_of(view)
        tags.setdefault(tag, _package_doc(view))
        item = paths.setdefault(openapi_path(rule.rule), {})
        methods = methods_of(rule)
        for method in methods:
            operation_id = rule.endpoint if len(methods) == 1 else f"{rule.endpoint}.{method.lower()}"
            item[method.lower()] = _operation(rule, method, operation_id, view, tag, schemas)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Slipway API",
            "version": _version(),
            "description": (
                "The HTTP API of Slipway, generated from the server's code. Fields may be added to any object "
                "(every object schema allows more properties), so clients ignore fields they do not know."
            ),
        },
        "tags": [{"name": name, "description": description} for name, description in sorted(tags.items())],
        "paths": paths,
        "components": {
            "schemas": schemas.schemas,
            "responses": {
                "Error": {
                    "description": "A refusal: 400 invalid input, 401 no or bad credential, 403 not allowed, 404 "
                    "absent or not visible to you, 409 conflict, 413 too large, 429 rate limited, 503 retry, 507 the "
                    "server's disk is full.",
                    "content": {"application/json": {"schema": schemas.ref(publicapi.ErrorBody)}},
                }
            },
            "securitySchemes": SECURITY_SCHEMES,
        },
    }


def _operation(
    rule: Rule, method: str, operation_id: str, view: Callable[..., Any], tag: str, schemas: SchemaSet
) -> dict[str, Any]:
    summary, description = _docstring(view, rule.endpoint)
    operation: dict[str, Any] = {"operationId": operation_id, "tags": [tag], "summary": summary}
    if description:
        operation["description"] = description
    parameters = [
        {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
        for name in ARGUMENT.findall(rule.rule)
    ]
    if parameters:
        operation["parameters"] = parameters
    body = _request_body(rule.endpoint, method, view, schemas)
    if body:
        operation["requestBody"] = body
    credentials = security_of(rule.endpoint)
    operation["security"] = [{name: []} for name in credentials]
    operation["responses"] = _responses(rule, schemas)
    return operation


def _responses(rule: Rule, schemas: SchemaSet) -> dict[str, Any]:
    endpoint = rule.endpoint
    errors = {"4XX": {"$ref": "#/components/responses/Error"}, "5XX": {"$ref": "#/components/responses/Error"}}
    if rule.websocket:
        return {"101": {"description": "Switching to a WebSocket."}, **errors}
    if endpoint in contract.OTHER_CONTENT:
        kind, what = contract.OTHER_CONTENT[endpoint]
        return {"200": {"description": what, "content": {kind: {}}}, **errors}
    reply = contract.REPLIES.get(endpoint)
    if reply is None:
        untyped = {"schema": {"$ref": f"#/components/schemas/{UNTYPED}"}}
        return {"2XX": {"description": "Success (untyped).", "content": {"application/json": untyped}}, **errors}
    if reply.message is None:
        return {str(reply.status): {"description": "Done; no body."}, **errors}
    schema = schemas.ref(reply.message)
    if reply.many:
        schema = {"type": "array", "items": schema}
    content: dict[str, Any] = {"application/json": {"schema": schema}}
    if endpoint in contract.STREAMS:
        content["text/event-stream"] = {"schema": {"type": "string"}}
        described = "Success; with ?follow=true a text/event-stream: `event: log` a line, then `event: end`."
        return {str(reply.status): {"description": described, "content": content}, **errors}
    return {str(reply.status): {"description": "Success.", "content": content}, **errors}


def _request_body(endpoint: str, method: str, view: Callable[..., Any], schemas: SchemaSet) -> dict[str, Any] | None:
    if endpoint in contract.RAW_BODIES:
        kinds = contract.RAW_BODIES[endpoint]
        return {
            "required": True,
            "content": {kind: {"schema": {"type": "string", "format": "binary"}} for kind in kinds},
        }
    message = request_message(view) or contract.REQUESTS.get(endpoint)
    if message is not None:
        return {"required": True, "content": {"application/json": {"schema": schemas.ref(message)}}}
    if method in ("POST", "PUT", "PATCH"):
        untyped = {"schema": {"$ref": f"#/components/schemas/{UNTYPED}"}}
        return {"required": False, "content": {"application/json": untyped}}
    return None


def security_of(endpoint: str) -> tuple[str, ...]:
    """The credentials an endpoint takes (any one of them), from the blueprint that serves it."""
    if endpoint in contract.OWN_CREDENTIALS:
        return contract.OWN_CREDENTIALS[endpoint]
    blueprint = endpoint.partition(".")[0]
    public = TOKEN_BLUEPRINTS.get(blueprint)
    if public is not None:
        return () if endpoint in public else contract.USER_TOKEN
    if blueprint in contract.OTHER_BLUEPRINTS:
        return contract.OTHER_BLUEPRINTS[blueprint]
    raise LookupError(f"{endpoint} is under {API_PREFIX} but app/apidocs/contract.py does not say who may call it")


def feature_of(view: Callable[..., Any]) -> str:
    """The feature package that serves a view (``app.catalog.api`` → ``catalog``): the document's tag."""
    parts = view.__module__.split(".")
    return parts[1] if len(parts) > 2 and parts[0] == "app" else parts[-1]


def _package_doc(view: Callable[..., Any]) -> str:
    module = inspect.getmodule(view)
    package = module.__package__ if module else None
    doc = inspect.getdoc(__import__(package, fromlist=["_"])) if package else None
    return " ".join(doc.split()) if doc else ""


def _docstring(view: Callable[..., Any], endpoint: str) -> tuple[str, str]:
    """The view's first docstring sentence as the summary (the rest as the description), or its name spelt out."""
    doc = " ".join((inspect.getdoc(view) or "").split())
    if not doc:
        return endpoint.partition(".")[2].replace("_", " ").capitalize() + ".", ""
    head, dot, rest = doc.partition(". ")
    return head + ("." if dot else ""), rest


@functools.cache
def request_message(view: Callable[..., Any]) -> type[Message] | None:
    """The message the view reads its body as, where it calls ``message_body(X)`` (app/core/validation.py)."""
    try:
        source = textwrap.dedent(inspect.getsource(inspect.unwrap(view)))
    except (OSError, TypeError):
        return None
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "message_body"
            and node.args
            and isinstance(node.args[0], ast.Name)
        ):
            found = inspect.unwrap(view).__globals__.get(node.args[0].id)
            if isinstance(found, type) and issubclass(found, Message):
                return found
    return None


def _version() -> str:
    try:
        return version("slipway")
    except PackageNotFoundError:  # a source tree that was never installed
        return "0"
