"""The OpenAPI document as the reference page reads it: calls grouped by tag, and each schema as a table of fields.

Types are written as pieces of text, some of them links to a schema's anchor, so that the template links them
without building HTML by hand."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from flask import Flask

from app.apidocs.document import openapi_document
from app.apidocs.schemas import REF_ROOT

# A type as text: (words, anchor) pieces; an empty anchor is plain text.
TypeText = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Body:
    status: str
    content_types: tuple[str, ...]
    type: TypeText
    description: str


@dataclass(frozen=True)
class Operation:
    anchor: str
    method: str
    path: str
    summary: str
    description: str
    parameters: tuple[str, ...]
    credentials: tuple[str, ...]
    request: Body | None
    responses: tuple[Body, ...]


@dataclass(frozen=True)
class Section:
    tag: str
    anchor: str
    description: str
    operations: tuple[Operation, ...]


@dataclass(frozen=True)
class Field:
    name: str
    type: TypeText
    required: bool
    default: str


@dataclass(frozen=True)
class SchemaTable:
    name: str
    anchor: str
    description: str
    fields: tuple[Field, ...]


@dataclass(frozen=True)
class Reference:
    title: str
    version: str
    sections: tuple[Section, ...]
    schemas: tuple[SchemaTable, ...]
    credentials: tuple[tuple[str, str], ...]


EXTENSION = "slipway_api_reference"


def reference_of(app: Flask) -> Reference:
    """The page's view of the app's OpenAPI document, built once per process as the document is."""
    found: Reference | None = app.extensions.get(EXTENSION)
    if found is None:
        found = app.extensions[EXTENSION] = build_reference(openapi_document(app))
    return found


def build_reference(document: dict[str, Any]) -> Reference:
    by_tag: dict[str, list[Operation]] = {tag["name"]: [] for tag in document["tags"]}
    for path, item in document["paths"].items():
        for method, operation in item.items():
            by_tag[operation["tags"][0]].append(_operation(path, method, operation))
    sections = tuple(
        Section(tag["name"], f"tag-{tag['name']}", tag["description"], tuple(by_tag[tag["name"]]))
        for tag in document["tags"]
    )
    components = document["components"]
    schemas = tuple(_table(name, schema) for name, schema in sorted(components["schemas"].items()))
    credentials = tuple(
        (name, _credential_text(scheme)) for name, scheme in sorted(components["securitySchemes"].items())
    )
    return Reference(document["info"]["title"], document["info"]["version"], sections, schemas, credentials)


def _operation(path: str, method: str, operation: dict[str, Any]) -> Operation:
    parameters = tuple(f"{item['name']} ({item['in']})" for item in operation.get("parameters", ()))
    body = operation.get("requestBody")
    request = _body("request", body) if body else None
    responses = tuple(
        _body(status, answer) for status, answer in operation["responses"].items() if "$ref" not in answer
    )
    return Operation(
        anchor=f"op-{operation['operationId']}",
        method=method.upper(),
        path=path,
        summary=operation["summary"],
        description=operation.get("description", ""),
        parameters=parameters,
        credentials=tuple(name for entry in operation["security"] for name in entry) or ("none (public)",),
        request=request,
        responses=responses,
    )


def _body(status: str, body: dict[str, Any]) -> Body:
    content: dict[str, Any] = body.get("content", {})
    json_body = content.get("application/json", {})
    kind = type_text(json_body["schema"]) if "schema" in json_body else ()
    return Body(status, tuple(content), kind, body.get("description", ""))


def _table(name: str, schema: dict[str, Any]) -> SchemaTable:
    required = set(schema.get("required", ()))
    fields = tuple(
        Field(field, type_text(item), field in required, json.dumps(item["default"]) if "default" in item else "")
        for field, item in schema.get("properties", {}).items()
    )
    return SchemaTable(name, schema_anchor(name), schema.get("description", ""), fields)


def schema_anchor(name: str) -> str:
    return "schema-" + name.replace(".", "-")


def type_text(schema: dict[str, Any]) -> TypeText:
    if "$ref" in schema:
        name = schema["$ref"].removeprefix(REF_ROOT)
        return ((name, schema_anchor(name)),)
    if "anyOf" in schema:
        pieces: list[tuple[str, str]] = []
        for index, member in enumerate(schema["anyOf"]):
            pieces += [(" or ", "")] if index else []
            pieces += type_text(member)
        return tuple(pieces)
    if "enum" in schema:
        return (("one of " + ", ".join(json.dumps(value) for value in schema["enum"]), ""),)
    kind = schema.get("type")
    if kind is None:
        return (("any JSON", ""),)
    if isinstance(kind, list):
        return ((" or ".join(kind), ""),)
    if kind == "array":
        return (("array of ", ""), *type_text(schema.get("items", {})), *_limits(schema))
    if kind == "object" and isinstance(schema.get("additionalProperties"), dict) and "properties" not in schema:
        return (("map of string to ", ""), *type_text(schema["additionalProperties"]))
    if schema.get("contentEncoding") == "base64":
        return (("string (base64)", ""),)
    return ((kind, ""), *_limits(schema))


def _limits(schema: dict[str, Any]) -> TypeText:
    limits = [
        f"{word} {schema[key]}"
        for key, word in (
            ("minimum", "at least"),
            ("maximum", "at most"),
            ("maxLength", "at most"),
            ("maxItems", "at most"),
        )
        if key in schema
    ]
    return ((f" ({', '.join(limits)})", ""),) if limits else ()


def _credential_text(scheme: dict[str, Any]) -> str:
    where = f"{scheme['in']} {scheme['name']}" if scheme["type"] == "apiKey" else "Authorization: Bearer <token>"
    description = scheme.get("description", "")
    return f"{where}. {description}" if description else where
