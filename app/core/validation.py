"""Field checks shared by services: each collects every problem before raising, so a form shows them all."""

from __future__ import annotations

import re
from typing import Any

from app.errors import InvalidInput

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
    if len(email) > 254 or not EMAIL_PATTERN.match(email):
        errors.add("email", "Enter a valid email address.")


def check_password(errors: FieldErrors, password: str, field: str = "password") -> None:
    if len(password) < 8:
        errors.add(field, "Use at least 8 characters.")
    elif len(password) > 256:
        errors.add(field, "Use at most 256 characters.")


def json_object(body: Any) -> dict[str, Any]:
    """The request body as a JSON object, or a 400 that says what was wrong with it."""
    if not isinstance(body, dict):
        raise InvalidInput("The request body must be a JSON object.")
    return body


def string_field(body: dict[str, Any], name: str, errors: FieldErrors, *, required: bool = True) -> str:
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
