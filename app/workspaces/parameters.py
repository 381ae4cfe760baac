"""Rich parameter values for a build: resolved (request, previous build, default) and validated here, so a
mistake is a 400 naming the parameter at once instead of a failed build minutes later."""

from __future__ import annotations

import json
import re
from typing import Any

from app.errors import InvalidInput
from app.validation import FieldErrors


def resolve_parameters(
    declared: list[dict[str, Any]],
    requested: dict[str, str],
    previous: dict[str, str] | None,
) -> list[dict[str, str]]:
    """The full set of values for a new build. ``previous`` is None for a workspace's first build."""
    errors = FieldErrors()
    names = {param["name"] for param in declared}
    for unknown in sorted(set(requested) - names):
        errors.add(unknown, "The template has no parameter with this name.")
    resolved = []
    for param in declared:
        name = param["name"]
        earlier = None if previous is None or param.get("ephemeral") else previous.get(name)
        if name in requested:
            value = requested[name]
            if previous is not None and name in previous and not param.get("mutable") and value != previous[name]:
                errors.add(name, "This parameter is immutable: it cannot change after the workspace was created.")
                continue
        elif earlier is not None:
            value = earlier
        elif not param.get("required"):
            value = str(param.get("default_value", ""))
        else:
            errors.add(name, "A value is required.")
            continue
        problem = validate_value(param, value, None if previous is None else previous.get(name))
        if problem:
            errors.add(name, problem)
            continue
        resolved.append({"name": name, "value": value})
    errors.raise_if_any("Some parameter values are invalid.")
    return resolved


def validate_value(param: dict[str, Any], value: str, previous: str | None) -> str | None:
    kind = param.get("type", "string")
    options = [str(option.get("value")) for option in param.get("options") or []]
    if kind == "number":
        try:
            number = float(value)
        except ValueError:
            return f"{value!r} is not a number."
        return _check_range(param, number, previous)
    if kind == "bool" and value not in ("true", "false"):
        return "Use true or false."
    if kind == "list(string)":
        try:
            items = json.loads(value)
        except ValueError:
            return 'Use a JSON list of strings, e.g. ["a", "b"].'
        if not isinstance(items, list) or not all(isinstance(item, str) for item in items):
            return "Use a JSON list of strings."
        if options and not set(items) <= set(options):
            return f"Every item must be one of: {', '.join(options)}."
        return None
    if options and value not in options:
        return f"Choose one of: {', '.join(options)}."
    regex = param.get("validation_regex")
    if regex and kind == "string":
        try:
            matched = re.fullmatch(regex, value) is not None
        except re.error:
            return None  # the provider already refused an invalid pattern at import time
        if not matched:
            message = param.get("validation_error") or f"Must match {regex}."
            return str(message).replace("{value}", value)
    return None


def _check_range(param: dict[str, Any], number: float, previous: str | None) -> str | None:
    low, high = param.get("validation_min"), param.get("validation_max")
    if (low is not None and number < float(low)) or (high is not None and number > float(high)):
        bounds = (
            f"between {low} and {high}"
            if low is not None and high is not None
            else (f"at least {low}" if low is not None else f"at most {high}")
        )
        message = param.get("validation_error") or f"Must be {bounds}."
        return str(message).replace("{min}", str(low)).replace("{max}", str(high)).replace("{value}", f"{number:g}")
    monotonic = param.get("validation_monotonic")
    if monotonic and previous is not None:
        try:
            before = float(previous)
        except ValueError:
            return None
        if monotonic == "increasing" and number < before:
            return f"Can only grow: it was {before:g}."
        if monotonic == "decreasing" and number > before:
            return f"Can only shrink: it was {before:g}."
    return None


def parameter_values_field(body: dict[str, Any], name: str = "rich_parameter_values") -> dict[str, str]:
    raw = body.get(name) or []
    if not isinstance(raw, list) or not all(isinstance(item, dict) and "name" in item for item in raw):
        raise InvalidInput(f"{name} must be a list of {{name, value}} objects.")
    return {str(item["name"]): str(item.get("value", "")) for item in raw}
