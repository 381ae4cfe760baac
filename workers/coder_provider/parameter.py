"""`data coder_parameter`: a rich parameter's value, from the build's CODER_PARAMETER_* variables, validated.

Errors are Terraform diagnostics that name the parameter, so a build log says which input is wrong and why.
The rules and messages follow Coder's provider (parameter.go) closely enough for users of both to recognise them.
"""

from __future__ import annotations

import json
import os
import re
import uuid
from typing import Any

from tf.schema import Block
from tf.utils import Diagnostics

from workers.coder_provider.base import (
    BOOL,
    NUMBER,
    STRING,
    CoderDataSource,
    State,
    computed,
    optional,
    required,
    schema,
    sha256_hex,
)
from workers.coder_provider.framework import ListNestedBlock

TYPES = ("string", "number", "bool", "list(string)")
MONOTONIC = ("increasing", "decreasing")


class ParameterError(ValueError):
    """One reason a parameter is invalid; the message is shown to the user as the diagnostic's detail."""


def parameter_env_name(name: str, *, previous: bool = False) -> str:
    return ("CODER_PARAMETER_PREVIOUS_" if previous else "CODER_PARAMETER_") + sha256_hex(name)


def check_type(kind: str, value: str) -> None:
    if kind == "number":
        try:
            float(value)
        except ValueError:
            raise ParameterError(f"{value!r} is not a number") from None
    elif kind == "bool" and value not in ("true", "false"):
        raise ParameterError(f'{value!r} is not a bool: it must be "true" or "false"')
    elif kind == "list(string)":
        try:
            parsed = json.loads(value)
        except ValueError:
            parsed = None
        if not isinstance(parsed, list) or not all(isinstance(item, str) for item in parsed):
            raise ParameterError(f'{value!r} is not a list of strings (a JSON array such as ["a", "b"])')


def _rendered(validation: State, value: str) -> str | None:
    """The template's own `error` text, with {min}, {max} and {value} filled in, when it gave one."""
    text = validation.get("error")
    if not text:
        return None
    for placeholder, replacement in (("{min}", validation.get("min")), ("{max}", validation.get("max"))):
        text = text.replace(placeholder, "" if replacement is None else str(int(replacement)))
    return str(text.replace("{value}", value))


def check_validation_fits_type(kind: str, validation: State) -> None:
    if kind != "number":
        for field in ("min", "max", "monotonic"):
            if validation.get(field) is not None:
                raise ParameterError(f"a {field} validation can only be specified for a number parameter, not {kind}")
    if validation.get("regex") is not None:
        if kind != "string":
            raise ParameterError(f"a regex validation can only be specified for a string parameter, not {kind}")
        if not validation.get("error"):
            raise ParameterError("a regex validation needs an error message (validation.error)")
        try:
            re.compile(validation["regex"])
        except re.error as exc:
            raise ParameterError(f"invalid regex {validation['regex']!r}: {exc}") from None
    monotonic = validation.get("monotonic")
    if monotonic is not None and monotonic not in MONOTONIC:
        raise ParameterError(f"monotonic must be {' or '.join(repr(m) for m in MONOTONIC)}, not {monotonic!r}")


def check_value(kind: str, validation: State, value: str, previous: str | None) -> None:
    """Coder's Validation.Valid: the template's error text wins over ours when it gave one."""
    if kind == "string" and validation.get("regex") is not None:
        # Go's regexp.MatchString finds a match anywhere, like re.search.
        if not re.search(validation["regex"], value):
            raise ParameterError(
                f"{_rendered(validation, value)} (value {value!r} does not match {validation['regex']!r})"
            )
    if kind != "number":
        return
    number = float(value)
    low, high = validation.get("min"), validation.get("max")
    if low is not None and number < low:
        raise ParameterError(_rendered(validation, value) or f"value {value} is less than the minimum {low:g}")
    if high is not None and number > high:
        raise ParameterError(_rendered(validation, value) or f"value {value} is more than the maximum {high:g}")
    monotonic = validation.get("monotonic")
    if monotonic and previous is not None:
        try:
            before = float(previous)
        except ValueError:
            return  # the previous build's value was not a number: nothing to compare with
        if monotonic == "increasing" and number < before:
            raise ParameterError(f"parameter value {value} must be equal or greater than previous value: {previous}")
        if monotonic == "decreasing" and number > before:
            raise ParameterError(f"parameter value {value} must be equal or lower than previous value: {previous}")


def check_options(kind: str, options: list[State], default: str | None, value: str | None) -> None:
    names: set[str] = set()
    values: set[str] = set()
    for option in options:
        if option["name"] in names:
            raise ParameterError(f"multiple options cannot have the same name {option['name']!r}")
        if option["value"] in values:
            raise ParameterError(f"multiple options cannot have the same value {option['value']!r}")
        check_type(kind, option["value"])
        names.add(option["name"])
        values.add(option["value"])
    if kind == "list(string)":
        # A multi-select: every chosen element must be an option.
        for label, chosen in (("default", default), ("value", value)):
            for element in json.loads(chosen) if chosen else []:
                if element not in values:
                    raise ParameterError(f"{label} element {element!r} must be one of the options: {sorted(values)}")
        return
    if default is not None and default not in values:
        raise ParameterError(f"default value {default!r} must be defined as one of options: {sorted(values)}")
    if value is not None and value not in values:
        raise ParameterError(f"value {value!r} must be one of the options: {sorted(values)}")


class ParameterDataSource(CoderDataSource):
    name = "parameter"
    schema_ = schema(
        required("name", STRING),
        optional("display_name", STRING),
        optional("description", STRING),
        optional("type", STRING, "string"),
        optional("form_type", STRING),
        optional("mutable", BOOL, False),
        optional("default", STRING),
        optional("icon", STRING),
        optional("order", NUMBER),
        optional("ephemeral", BOOL, False),
        optional("styling", STRING),
        computed("value"),
        computed("optional", BOOL),
        computed("id"),
        blocks=(
            ListNestedBlock(
                "option",
                Block(
                    attributes=[
                        required("name", STRING),
                        required("value", STRING),
                        optional("description", STRING),
                        optional("icon", STRING),
                    ]
                ),
            ),
            ListNestedBlock(
                "validation",
                Block(
                    attributes=[
                        optional("min", NUMBER),
                        optional("max", NUMBER),
                        optional("monotonic", STRING),
                        optional("regex", STRING),
                        optional("error", STRING),
                        computed("min_disabled", BOOL),
                        computed("max_disabled", BOOL),
                    ]
                ),
                max_items=1,
            ),
        ),
    )

    def compute(self, diags: Diagnostics, state: State) -> State | None:
        name = state["name"]
        state["id"] = str(uuid.uuid4())
        state["type"] = state["type"] or "string"
        state["mutable"] = bool(state["mutable"])
        state["ephemeral"] = bool(state["ephemeral"])
        state["optional"] = state["default"] is not None
        for validation in state["validation"]:
            # Coder's compatibility flags: a bound that was not set is disabled (0 would otherwise be a bound).
            validation["min_disabled"] = validation.get("min") is None
            validation["max_disabled"] = validation.get("max") is None
        supplied = os.environ.get(parameter_env_name(name))
        value = supplied if supplied is not None else state["default"]
        state["value"] = "" if value is None else value
        try:
            self.check(state, value, os.environ.get(parameter_env_name(name, previous=True)))
        except ParameterError as exc:
            diags.add_error(f"Invalid parameter {name!r}", f"coder_parameter {name!r}: {exc}")
            return None
        return state

    @staticmethod
    def check(state: State, value: Any, previous: str | None) -> None:
        kind = state["type"]
        if kind not in TYPES:
            raise ParameterError(f"type {kind!r} must be one of {', '.join(TYPES)}")
        if state["ephemeral"] and not state["mutable"]:
            raise ParameterError("an ephemeral parameter must be mutable")
        if state["ephemeral"] and state["default"] is None:
            raise ParameterError("an ephemeral parameter requires a default value")
        if state["default"] is not None:
            check_type(kind, state["default"])
        validation = state["validation"][0] if state["validation"] else {}
        check_validation_fits_type(kind, validation)
        # No value at all is how a template import plans a required parameter: nothing to check yet.
        if value is not None:
            check_type(kind, value)
        if state["option"]:
            check_options(kind, state["option"], state["default"], value)
        if state["default"] is not None:
            try:
                check_value(kind, validation, state["default"], None)
            except ParameterError as exc:
                raise ParameterError(f"the default value is invalid: {exc}") from None
        if value is not None:
            check_value(kind, validation, value, previous)
