"""Field checks shared by services: each collects every problem before raising, so a form shows them all."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TypeVar

from flask import request

from app.core.errors import InvalidInput
from protocol.codec import JSON, JsonObject, Message, ProtocolError, loads
from protocol.provisionerd import NameValue
from protocol.values import MAX_INT64, parse_int

M = TypeVar("M", bound=Message)

USERNAME_PATTERN = re.compile(r"^[a-zA-Z0-9]+(?:-[a-zA-Z0-9]+)*$")
EMAIL_PATTERN = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")


class FieldErrors:
    def __init__(self) -> None:
        self.items: list[dict[str, str]] = []

    def add(self, field: str, detail: str) -> None:
        self.items.append({"field": field, "detail": detail})

    def raise_if_any(self, message: str = "Some fields are invalid.") -> None:
        if self.items:
            raise InvalidInput(message, validations=self.items)


def check_username(errors: FieldErrors, username: str) -> None:
    if not 1 <= len(username) <= 32 or not USERNAME_PATTERN.match(username):
        errors.add(
            "username",
            "Use 1-32 letters, digits and single hyphens, not starting or ending with a hyphen.",
        )


def check_email(errors: FieldErrors, email: str) -> None:
    if len(email) > 254 or not EMAIL_PATTERN.match(email) or text_problem(email):
        errors.add("email", "Enter a valid email address.")


def check_password(errors: FieldErrors, password: str, field: str = "password") -> None:
    if len(password) < 8:
        errors.add(field, "Use at least 8 characters.")
    elif len(password) > 256:
        errors.add(field, "Use at most 256 characters.")


def text_problem(text: str) -> str:
    """Why ``text`` cannot be stored or handed on as it is ("" when it can): a NUL character, which PostgreSQL's text,
    C strings and environment variables refuse, or a lone surrogate (JSON's ``"\\ud800"``), which no UTF-8 holds."""
    if "\x00" in text:
        return "Must not contain a NUL character."
    try:
        text.encode()
    except UnicodeEncodeError:
        return "Must be text: it holds a lone surrogate (\\ud800-\\udfff)."
    return ""


def json_body() -> JsonObject:
    """The request body as a JSON object, read strictly — no NaN, nothing nested deeper than a message can be —
    or a 400 that says what is wrong. Content-Type is not required: `curl -d` sends form headers with JSON."""
    try:
        body = loads(request.get_data(cache=True))
    except ProtocolError as exc:
        raise InvalidInput(str(exc)) from None
    if not isinstance(body, dict):
        raise InvalidInput("The request body must be a JSON object.")
    return body


def message_body(message: type[M]) -> M:
    """The request body read as a protocol message; a 400 naming the field that is wrong otherwise."""
    try:
        return message.from_json(loads(request.get_data(cache=True)))
    except ProtocolError as exc:
        validations = [{"field": exc.field, "detail": exc.problem}] if exc.path else []
        raise InvalidInput(f"The request body is invalid: {exc}", validations=validations) from None


def query_int(name: str, default: int, *, minimum: int = 0, maximum: int = MAX_INT64) -> int:
    """A whole-number query parameter (``?limit=``, ``?after=``), or a 400 naming it."""
    raw = request.args.get(name)
    if raw is None or raw == "":
        return default
    try:
        return parse_int(raw, minimum=minimum, maximum=maximum)
    except ValueError:
        raise InvalidInput(
            f"{name} must be a whole number from {minimum} to {maximum}.",
            validations=[{"field": name, "detail": f"Use a whole number from {minimum} to {maximum}."}],
        ) from None


def string_field(body: Mapping[str, JSON], name: str, errors: FieldErrors, *, required: bool = True) -> str:
    value = body.get(name)
    if value is None:
        if required:
            errors.add(name, "This field is required.")
        return ""
    if not isinstance(value, str):
        errors.add(name, "Must be a string.")
        return ""
    if len(value) > 4096:
        errors.add(name, "Too long.")
        return ""
    return value


def string_map_field(body: Mapping[str, JSON], name: str, errors: FieldErrors) -> dict[str, str]:
    """An optional ``{key: text}`` object (tags); ``{}`` when absent."""
    raw = body.get(name) or {}
    if not isinstance(raw, Mapping) or not all(isinstance(value, str) for value in raw.values()):
        errors.add(name, "Must be an object of strings.")
        return {}
    return {str(key): str(value) for key, value in raw.items()}


def whole_number_field(body: Mapping[str, JSON], name: str, errors: FieldErrors) -> int | None:
    """An optional whole number (``true`` is not one); None when absent."""
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        errors.add(name, "Must be a whole number.")
        return None
    return value


def name_values(body: Mapping[str, JSON], name: str, errors: FieldErrors) -> list[NameValue]:
    """``[{name, value}]`` (variable or parameter values); a number or boolean value is taken as its text."""
    raw = body.get(name) or []
    if not isinstance(raw, list) or not all(
        isinstance(item, dict) and isinstance(item.get("name"), str) for item in raw
    ):
        errors.add(name, "Must be a list of {name, value} objects.")
        return []
    values = []
    for item in raw:
        value = item.get("value", "")
        if isinstance(value, bool):
            value = "true" if value else "false"
        elif isinstance(value, int | float):
            value = str(value)
        elif not isinstance(value, str):
            errors.add(f"{name}.{item['name']}", "The value must be text.")
            continue
        values.append(NameValue(name=item["name"], value=value))
    return values
