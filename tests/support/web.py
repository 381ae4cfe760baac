"""Helpers for driving pages through Flask's test client as a browser would (CSRF tokens included)."""

from __future__ import annotations

import html
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


def stream_url(page: str) -> str:
    """Where a page's first live region connects for its Server-Sent Events (``sse-connect``)."""
    match = re.search(r'sse-connect="([^"]+)"', page)
    assert match is not None, "the page has no event stream"
    return html.unescape(match.group(1))


def first_event(client: FlaskClient, url: str) -> bytes:
    """What the stream at ``url`` sends up to and including its first event (the preamble comes first)."""
    stream = client.get(url, buffered=False)
    received = b""
    for chunk in stream.response:
        received += chunk
        if b"event:" in received:
            break
    stream.close()
    return received
