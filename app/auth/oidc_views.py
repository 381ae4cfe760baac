"""OpenID Connect sign-in pages: start at /login/oidc, come back at API.md's callback path, and /cli-auth, where a
person signed in through their provider gets a token to paste into `slipway login`.

The callback lives under /api/v2 (API.md fixes the redirect URI) but is a page in a browser: its failures are
rendered as pages here, never as JSON.
"""

from __future__ import annotations

import logging

from authlib.integrations.base_client.errors import MismatchingStateError, OAuthError
from flask import Response, current_app, jsonify, redirect, render_template, request, session, url_for
from joserfc.errors import JoseError
from werkzeug.wrappers import Response as WerkzeugResponse

from app.auth import oidc
from app.auth.access import page_user, sign_in_browser
from app.auth.tokens import issue_session_token
from app.auth.views import safe_next
from app.blueprints import api_blueprint, page_blueprint
from app.config import Settings

log = logging.getLogger(__name__)
bp = page_blueprint("oidc", __name__, public=("start", "callback"))
api = api_blueprint("auth_api", __name__, public=("auth_methods",))
NEXT_KEY, ID_TOKEN_KEY = "oidc_next", "oidc_id_token"


def _settings() -> Settings:
    settings: Settings = current_app.config["SLIPWAY_SETTINGS"]
    return settings


def _failure(message: str, status: int) -> tuple[str, int]:
    return render_template("auth/oidc_error.html", message=message), status


@bp.get("/login/oidc")
def start() -> WerkzeugResponse | tuple[str, int]:
    try:
        client = oidc.provider()
    except oidc.OidcError as error:
        return _failure(error.message, error.status)
    session[NEXT_KEY] = safe_next(request.args.get("next"))
    response: WerkzeugResponse = client.authorize_redirect(_settings().access_url + oidc.CALLBACK_PATH)
    return response


@bp.get(oidc.CALLBACK_PATH)
def callback() -> WerkzeugResponse | tuple[str, int]:
    try:
        client = oidc.provider()
        token = client.authorize_access_token()
        claims = dict(token.get("userinfo") or {})
        settings = _settings()
        if not claims.get(settings.oidc_email_field) or not claims.get(settings.oidc_username_field):
            # Many providers keep profile claims out of the ID token: userinfo has them.
            claims = {**dict(client.userinfo(token=token)), **claims}
        user = oidc.sign_in(settings, claims)
    except oidc.OidcError as error:
        log.warning("OIDC sign-in refused: %s", error.message)
        return _failure(error.message, error.status)
    except MismatchingStateError:
        log.warning("OIDC callback with a state this browser did not start")
        return _failure("This sign-in did not start here, or took too long. Start again.", 400)
    except OAuthError as error:
        log.warning("OIDC sign-in failed at the provider: %s %s", error.error, error.description or "")
        return _failure(f"The identity provider refused the sign-in ({error.error}).", 502)
    except JoseError as error:
        log.warning("OIDC ID token rejected: %s", error)
        return _failure("The identity provider's ID token could not be verified.", 502)
    except Exception:  # network errors talking to the token or userinfo endpoints
        log.exception("OIDC sign-in failed")
        return _failure("The identity provider could not be reached. Try again later.", 502)
    sign_in_browser(user)
    session[ID_TOKEN_KEY] = token.get("id_token", "")
    return redirect(session.pop(NEXT_KEY, None) or url_for("workspaces.index"))


def provider_logout_url() -> str | None:
    """Where to send a browser after the local sign-out, to end the provider's session too (if it offers it)."""
    id_token = session.pop(ID_TOKEN_KEY, None)
    if not id_token or not _settings().oidc_enabled:
        return None
    try:
        client = oidc.provider()
    except oidc.OidcError:
        return None
    endpoint = oidc.end_session_url(client)
    if not endpoint:
        return None
    url: str = client.create_logout_url(
        post_logout_redirect_uri=_settings().access_url + url_for("auth.login"), id_token_hint=id_token
    )["url"]
    return url


@bp.route("/cli-auth", methods=["GET", "POST"])
def cli_auth() -> str:
    """A session token for the CLI, made on request (a POST, so no other site can make one by linking here)."""
    token = issue_session_token(page_user(), _settings().session_duration) if request.method == "POST" else None
    return render_template("auth/cli_auth.html", token=token)


@api.get("/users/authmethods")
def auth_methods() -> Response:
    settings = _settings()
    return jsonify(
        {
            "password": {"enabled": not settings.disable_password_auth},
            "oidc": {
                "enabled": settings.oidc_enabled,
                "sign_in_text": settings.oidc_sign_in_text,
                "icon_url": settings.oidc_icon_url,
            },
        }
    )
