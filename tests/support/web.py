"""Helpers for driving pages through Flask's test client as a browser would (CSRF tokens included)."""

from __future__ import annotations

import re
from typing import Any

from flask.testing import FlaskClient

CSRF_PATTERN = re.compile(r'name="csrf_token" value="([^"]+)"')


def csrf_token(client: FlaskClient, path: str) -> str:
    page = client.get(path)
    match = CSRF_PATTERN.search(page.get_data(as_text=True))
    assert match, f"no CSRF token on {path} (status {page.status_code})"
    return match.group(1)


def post_form(client: FlaskClient, path: str, data: dict[str, Any], *, token_from: str | None = None) -> Any:
    token = csrf_token(client, token_from or path)
    return client.post(path, data={**data, "csrf_token": token})


def sign_in(client: FlaskClient, email: str, password: str) -> None:
    response = post_form(client, "/login", {"email": email, "password": password})
    assert response.status_code == 302, response.get_data(as_text=True)
