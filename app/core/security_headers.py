"""Security headers on every response of the dashboard and the API, and the dashboard's Content-Security-Policy.

Pages may run only Slipway's own scripts and styles (no inline code: handlers live in static/slipway.js), may not be
framed, and post forms only to Slipway (and to the identity provider, whose end-session endpoint a sign-out is
redirected to). Responses that are not pages get a policy that allows nothing, should one be opened as a document.

Workspace apps are proxied on the dashboard's origin (``/@owner/workspace/apps/…``) but are not Slipway's pages:
the proxy answers with a :class:`ForeignResponse`, which keeps the app's own headers (plus the proxy's sandbox for
viewers other than the owner) and gets none of these.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from flask import Flask, Response, current_app, g

from app.core.config import Settings

# Pages, and every other response, whatever it is.
COMMON_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "X-Frame-Options": "DENY",
}
NOT_A_PAGE_POLICY = "default-src 'none'; frame-ancestors 'none'"
EXTENSION = "slipway_page_policies"


class ForeignResponse(Response):
    """A response whose headers belong to someone else (a workspace app behind the proxy): none are added."""


def page_policy(settings: Settings, *, inline_styles: bool = False) -> str:
    # connect-src 'self' covers the SSE streams and, in CSP level 3 browsers, same-origin ws:/wss: (the terminal).
    idp = [_origin(settings.oidc_issuer_url)] if settings.oidc_enabled else []
    icon = _origin(settings.oidc_icon_url) if settings.oidc_icon_url.startswith("http://") else ""
    directives = {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'", "'unsafe-inline'"] if inline_styles else ["'self'"],
        # App and provider icons may come from anywhere on https (Coder templates point at CDNs).
        "img-src": ["'self'", "data:", "https:", *([icon] if icon else [])],
        "connect-src": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'self'"],
        # Chromium checks redirects after a form post too: sign-out is redirected to the provider's end session.
        "form-action": ["'self'", *idp],
        "frame-ancestors": ["'none'"],
    }
    return "; ".join(f"{name} {' '.join(sources)}" for name, sources in directives.items())


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def allow_inline_styles() -> None:
    """Let this page's own scripts add <style> elements (xterm.js draws the web terminal with them); scripts stay
    as strict as everywhere else."""
    g.inline_styles = True


def add_security_headers(response: Response) -> Response:
    if isinstance(response, ForeignResponse):
        return response
    for name, value in COMMON_HEADERS.items():
        response.headers.setdefault(name, value)
    if "Content-Security-Policy" not in response.headers:
        response.headers["Content-Security-Policy"] = _policy_for(response)
    return response


def _policy_for(response: Response) -> str:
    if response.mimetype != "text/html":
        return NOT_A_PAGE_POLICY
    policies: tuple[str, str] = current_app.extensions[EXTENSION]
    strict, inline_styles = policies
    return inline_styles if g.get("inline_styles") else strict


def init_app(app: Flask, settings: Settings) -> None:
    app.extensions[EXTENSION] = (page_policy(settings), page_policy(settings, inline_styles=True))
    app.after_request(add_security_headers)
