"""Where to send a person after signing in: only back into this site."""

from __future__ import annotations

from urllib.parse import urlsplit

from flask import url_for


def safe_next(target: str | None) -> str:
    """Only same-site relative paths, so the login page cannot be used as an open redirect."""
    if target and target.startswith("/") and not target.startswith("//") and not urlsplit(target).netloc:
        return target
    return url_for("workspaces.index")
