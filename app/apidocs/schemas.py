"""JSON Schema (2020-12, as OpenAPI 3.1 uses it) for the typed messages of protocol/, from their type hints.

A schema accepts what :meth:`protocol.codec.Message.from_json` accepts: the same types, bounds and required
fields, and any field it does not know (``additionalProperties: true``: the server may add fields, and a reader
ignores them — protocol/codec.py's docstring). Each message becomes one named schema under
``#/components/schemas``; messages nest by ``$ref``.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, Literal, Union

from protocol.codec import Bounds, MaxLength, Message

REF_ROOT = "#/components/schemas/"
Schema = dict[str, Any]


class SchemaSet:
    """The named schemas of the messages met so far; two messages of one name (``Preset`` of the public API and of
    the provisioner protocol) get their module's name in front of the second."""

    def __init__(self) -> None:
        self.schemas: dict[str, Schema] = {}
        self._names: dict[type[Message], str] = {}

    def ref(self, message: type[Message]) -> Schema:
        return {"$ref": REF_ROOT + self.name_of(message)}

    def name_of(self, message: type[Message]) -> str:
        name = self._names.get(message)
        if name is None:
            name = message.__name__
            if name in self.schemas:
                name = f"{message.__module__.rsplit('.', 1)[-1]}.{name}"
            self._names[message] = name
            self.schemas[name] = {}  # taken before the fields are read: a message may (one day) nest itself
            self.schemas[name] = self._message_schema(message)
        return name

    def _message_schema(self, message: type[Message]) -> Schema:
        hints = typing.get_type_hints(message, include_extras=True)
        properties: dict[str, Schema] = {}
        required: list[str] = []
        for item in dataclasses.fields(message):  # type: ignore[arg-type]  # every Message is a dataclass
            properties[item.name] = self.schema_of(hints[item.name])
            if item.default is dataclasses.MISSING and item.default_factory is dataclasses.MISSING:
                required.append(item.name)
            elif _plain(item.default):
                properties[item.name]["default"] = item.default
        schema: Schema = {"type": "object", "properties": properties, "additionalProperties": True}
        if required:
            schema["required"] = required
        doc = message.__doc__ or ""
        # dataclasses write a signature as the docstring of a class that has none: that is no description.
        if doc and not doc.startswith(f"{message.__name__}("):
            schema["description"] = " ".join(doc.split())
        return schema

    def schema_of(self, annotation: object) -> Schema:
        origin, args = typing.get_origin(annotation), typing.get_args(annotation)
        if origin is typing.Annotated:
            return _constrained(self.schema_of(args[0]), args[1:])
        if isinstance(annotation, type) and issubclass(annotation, Message):
            return self.ref(annotation)
        if annotation in _SCALARS:
            return dict(_SCALARS[annotation])
        if origin is Literal:
            return {"enum": list(args)}
        if origin in (Union, types.UnionType):
            (inner,) = [member for member in args if member is not type(None)]
            schema = self.schema_of(inner)
            if set(schema) == {"type"} and isinstance(schema["type"], str):
                return {"type": [schema["type"], "null"]}
            return {"anyOf": [schema, {"type": "null"}]}
        if origin is list or (origin is tuple and len(args) == 2 and args[1] is Ellipsis):
            return {"type": "array", "items": self.schema_of(args[0])}
        if origin is dict and args[0] is str:
            return {"type": "object", "additionalProperties": self.schema_of(args[1])}
        raise TypeError(f"no JSON Schema for {annotation!r}")


_SCALARS: dict[object, Schema] = {
    str: {"type": "string"},
    bool: {"type": "boolean"},
    int: {"type": "integer"},
    float: {"type": "number"},
    bytes: {"type": "string", "contentEncoding": "base64"},
    type(None): {"type": "null"},
}


def _plain(value: object) -> bool:
    return value is None or isinstance(value, str | int | float | bool)


def _constrained(schema: Schema, rules: tuple[object, ...]) -> Schema:
    for rule in rules:
        if isinstance(rule, Bounds):
            if rule.minimum is not None:
                schema["minimum"] = rule.minimum
            if rule.maximum is not None:
                schema["maximum"] = rule.maximum
        elif isinstance(rule, MaxLength):
            schema["maxItems" if schema.get("type") == "array" else "maxLength"] = rule.limit
    return schema
