"""OpenID Connect sign-in pages: start at /login/oidc, come back at API.md's callback path, and /cli-auth, where a
person signed in through their provider gets a token to paste into `slipway login`. Linking an identity to an
existing account (link mode from the Account page, or a sign-in whose email matched) ends at /account/oidc/link.

The callback lives under /api/v2 (API.md fixes the redirect URI) but is a page in a browser: its failures are
rendered as pages here, never as JSON.
"""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import parse_qs, urlsplit

from flask import Response, current_app, flash, jsonify, redirect, render_template, request, session, url_for
from flask_login import current_user
from werkzeug.wrappers import Response as WerkzeugResponse

from app.auth import oidc, oidc_links
from app.auth.access import page_user, record_failed_sign_in, sign_in_browser
from app.auth.blueprints import api_blueprint, page_blueprint
from app.auth.redirects import safe_next
from app.core.config import Settings
from app.core.errors import Forbidden, NotFound
from app.users.models import User
from app.users.tokens import issue_session_token

log = logging.getLogger(__name__)
bp = page_blueprint("oidc", __name__, public=("start", "callback"))
api = api_blueprint("auth_api", __name__, public=("auth_methods",))
NEXT_KEY, ID_TOKEN_KEY = "oidc_next", "oidc_id_token"
PENDING_LINK_KEY, LINK_FLOW_KEY = "oidc_pending_link", "oidc_link_flow"


def _settings() -> Settings:
    settings: Settings = current_app.config["SLIPWAY_SETTINGS"]
    return settings


def _failure(message: str, status: int) -> tuple[str, int]:
    record_failed_sign_in("", "oidc", status, message)
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


@bp.post("/account/oidc/link/start")
def start_link() -> WerkzeugResponse | tuple[str, int]:
    """Link mode: the signed-in user goes to the provider, and the identity they come back with waits for them."""
    user = page_user()
    if user.oidc_subject is not None:
        flash(oidc_links.ALREADY_LINKED, "info")
        return redirect(url_for("users.account"))
    try:
        client = oidc.provider()
    except oidc.OidcError as error:
        return _failure(error.message, error.status)
    response: WerkzeugResponse = client.authorize_redirect(_settings().access_url + oidc.CALLBACK_PATH)
    # Bound to this authorization request's state: another sign-in started in the same browser stays a sign-in.
    state = parse_qs(urlsplit(response.location or "").query).get("state", [""])[0]
    session[LINK_FLOW_KEY] = {"state": state, "user_id": user.id}
    return response


@bp.get(oidc.CALLBACK_PATH)
def callback() -> WerkzeugResponse | tuple[str, int]:
    # Here, not at the top: every web worker imports this module as it starts, and authlib is its heaviest import.
    from authlib.integrations.base_client.errors import MismatchingStateError, OAuthError
    from joserfc.errors import JoseError

    link_flow = _link_flow_of_this_callback()
    try:
        client = oidc.provider()
        token = client.authorize_access_token()
        claims = _claims(client, token)
        if link_flow is not None:
            link = oidc_links.identity_to_link(_settings(), claims, _user_who_started(link_flow))
            session[PENDING_LINK_KEY] = link.to_session()
            return redirect(url_for("oidc.confirm_link"))
        user = oidc.sign_in(_settings(), claims)
    except oidc.LinkNeeded as needed:
        session[PENDING_LINK_KEY] = needed.link.to_session()
        log.info("OIDC sign-in matched an account not linked yet: asked for its password")
        next_page = url_for("auth.login", next=url_for("oidc.confirm_link"))
        return render_template("auth/oidc_link_needed.html", message=needed.message, next_page=next_page), 409
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
    sign_in_browser(user, "oidc")
    session[ID_TOKEN_KEY] = token.get("id_token", "")
    return redirect(session.pop(NEXT_KEY, None) or url_for("workspaces.index"))


def _claims(client: Any, token: dict[str, Any]) -> dict[str, Any]:
    claims = dict(token.get("userinfo") or {})
    settings = _settings()
    if not claims.get(settings.oidc_email_field) or not claims.get(settings.oidc_username_field):
        # Many providers keep profile claims out of the ID token: userinfo has them.
        claims = {**dict(client.userinfo(token=token)), **claims}
    return claims


def _link_flow_of_this_callback() -> dict[str, str] | None:
    flow = session.get(LINK_FLOW_KEY)
    if isinstance(flow, dict) and flow.get("state") and flow.get("state") == request.args.get("state"):
        session.pop(LINK_FLOW_KEY)
        return flow
    return None


def _user_who_started(link_flow: dict[str, str]) -> User:
    """The signed-in user who started link mode; anyone else (signed out meanwhile, someone else) is refused."""
    if not current_user.is_authenticated or page_user().id != link_flow.get("user_id"):
        raise oidc.OidcError("You are no longer signed in as the account that started linking. Start again.")
    return page_user()


@bp.route("/account/oidc/link", methods=["GET", "POST"])
def confirm_link() -> WerkzeugResponse | str:
    """Asks "Link <issuer> identity <email> to your account?"; only the signed-in holder of the account answers."""
    user = page_user()
    link = oidc.PendingLink.from_session(session.get(PENDING_LINK_KEY))
    if link is None:
        session.pop(PENDING_LINK_KEY, None)
        raise NotFound("No sign-in identity is waiting to be linked, or the request expired. Start again.")
    if link.account_id != user.id:
        session.pop(PENDING_LINK_KEY, None)  # meant for another account: nobody else may take it over
        raise Forbidden("The sign-in identity waiting to be linked is not for this account. Start again.")
    if request.method == "GET":
        return render_template("auth/oidc_link_confirm.html", link=link)
    session.pop(PENDING_LINK_KEY, None)
    if request.form.get("decision") != "link":
        flash("Nothing was linked.", "info")
        return redirect(url_for("users.account"))
    oidc_links.link_identity(_settings(), user, link)
    flash(f"Linked. You can now sign in with {_settings().oidc_sign_in_text}.", "success")
    return redirect(url_for("users.account"))


def forget_linking() -> None:
    """Drop an identity waiting to be linked at sign-out: the next person at this browser must not be offered it.

    A link mode flow stays: if it comes back, it is refused as started by someone no longer signed in.
    """
    session.pop(PENDING_LINK_KEY, None)


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
