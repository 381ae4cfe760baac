"""Pages: linking a Git provider (OAuth2 authorization code with state and PKCE, or the device flow), unlinking,
the Git SSH key, and the admins' overview of providers."""

from __future__ import annotations

import secrets
import time
from typing import Any

from flask import flash, redirect, render_template, request, session, url_for
from werkzeug.wrappers import Response

from app.auth.access import page_user, require_role
from app.auth.blueprints import page_blueprint
from app.auth.redirects import safe_next
from app.core.errors import DomainError
from app.externalauth import oauth, services
from app.users.models import ROLE_OWNER, ROLE_TEMPLATE_ADMIN

bp = page_blueprint("externalauth", __name__)
FLOWS_KEY = "external_auth_flows"
DEVICE_KEY = "external_auth_device"
# A person may have a few links under way at once (several tabs); an older or stale one is simply dropped.
MAX_FLOWS = 5
FLOW_SECONDS = 15 * 60


def _problem(title: str, error: DomainError, provider_id: str) -> tuple[str, int]:
    return render_template("externalauth/problem.html", title=title, message=error.message, provider_id=provider_id), (
        error.status
    )


@bp.get("/external-auth/<provider_id>")
def start(provider_id: str) -> Response | tuple[str, int]:
    """Link (or relink): off to the provider with a fresh state and PKCE verifier kept in this browser's session."""
    target = services.provider(provider_id)
    back = safe_next(request.args.get("redirect") or url_for("users.account") + "#git-providers")
    if target.device_flow:
        return redirect(url_for("externalauth.device", provider_id=provider_id, redirect=back))
    state = secrets.token_urlsafe(32)
    verifier, challenge = oauth.new_pkce_pair()
    now = time.time()
    flows: dict[str, dict[str, Any]] = {
        key: flow for key, flow in session.get(FLOWS_KEY, {}).items() if now - flow["t"] < FLOW_SECONDS
    }
    flows[state] = {"p": provider_id, "v": verifier, "n": back, "t": now}
    session[FLOWS_KEY] = dict(sorted(flows.items(), key=lambda item: item[1]["t"])[-MAX_FLOWS:])
    return redirect(
        oauth.authorization_url(
            target, redirect_uri=services.callback_url(provider_id), state=state, challenge=challenge
        )
    )


@bp.get("/external-auth/<provider_id>/callback")
def callback(provider_id: str) -> Response | tuple[str, int]:
    target = services.provider(provider_id)
    flows: dict[str, dict[str, Any]] = dict(session.get(FLOWS_KEY, {}))
    # Used once: a replayed callback finds no state.
    flow = flows.pop(request.args.get("state", ""), None)
    session[FLOWS_KEY] = flows
    if flow is None or flow["p"] != provider_id or time.time() - flow["t"] >= FLOW_SECONDS:
        return render_template(
            "externalauth/problem.html",
            title="This link was refused",
            message="This sign-in was not started from this browser, took too long, or was already used. "
            "Start again with Link.",
            provider_id=provider_id,
        ), 400
    if request.args.get("error"):
        description = request.args.get("error_description") or request.args["error"]
        return render_template(
            "externalauth/problem.html",
            title=f"{target.display_name} did not link",
            message=f"{target.display_name} said: {description[:300]}",
            provider_id=provider_id,
        ), 400
    try:
        tokens = oauth.exchange_code(
            target,
            code=request.args.get("code", ""),
            redirect_uri=services.callback_url(provider_id),
            verifier=flow["v"],
        )
    except oauth.ProviderUnavailable as error:
        services.record_health(target, error.why)
        return _problem(f"{target.display_name} is not answering", error, provider_id)
    except oauth.TokenRefused as error:
        return _problem(f"{target.display_name} did not link", error, provider_id)
    services.store_tokens(page_user(), target, tokens)
    flash(f"Linked your {target.display_name} account.", "success")
    return redirect(safe_next(flow["n"]))


@bp.get("/external-auth/<provider_id>/device")
def device(provider_id: str) -> Response | str | tuple[str, int]:
    """GitHub's device flow: a code to enter at the provider; the page then polls until it is approved."""
    target = services.provider(provider_id)
    if not target.device_flow:
        return redirect(url_for("externalauth.start", provider_id=provider_id))
    try:
        code = oauth.start_device_flow(target)
    except oauth.ProviderUnavailable as error:
        services.record_health(target, error.why)
        return _problem(f"{target.display_name} is not answering", error, provider_id)
    except DomainError as error:
        return _problem(f"{target.display_name} is not answering", error, provider_id)
    session[DEVICE_KEY] = {"p": provider_id, "d": code.device_code, "e": code.expires_at.timestamp()}
    back = safe_next(request.args.get("redirect") or url_for("users.account") + "#git-providers")
    return render_template("externalauth/device.html", provider=target, code=code, back=back)


@bp.post("/external-auth/<provider_id>/device")
def device_poll(provider_id: str) -> str | tuple[str, int]:
    """htmx, every few seconds: has the person approved the code yet?"""
    target = services.provider(provider_id)
    pending = session.get(DEVICE_KEY)
    status = "pending"
    message = ""
    if not pending or pending["p"] != provider_id or time.time() >= pending["e"]:
        status, message = "expired", "The code expired. Reload the page for a new one."
    else:
        try:
            tokens = oauth.poll_device_flow(target, pending["d"])
        except DomainError as error:
            status, message = "failed", error.message
        else:
            if tokens is not None:
                services.store_tokens(page_user(), target, tokens)
                session.pop(DEVICE_KEY, None)
                status, message = "linked", f"Linked your {target.display_name} account."
    return render_template("externalauth/_partials/device_status.html", status=status, message=message,
                           provider=target, back=safe_next(request.form.get("back")))  # fmt: skip


@bp.post("/external-auth/<provider_id>/unlink")
def unlink(provider_id: str) -> Response:
    target = services.provider(provider_id)
    try:
        services.unlink(page_user(), provider_id)
    except DomainError as error:
        flash(error.message, "error")
    else:
        flash(f"Unlinked {target.display_name}; its tokens were revoked where the provider allows it.", "success")
    return redirect(url_for("users.account") + "#git-providers")


@bp.post("/account/gitsshkey")
def regenerate_git_ssh_key() -> Response:
    services.git_ssh_key(page_user(), regenerate=True)
    flash("A new Git SSH key was made: replace the old public key at your Git providers.", "success")
    return redirect(url_for("users.account") + "#git-ssh-key")


@bp.get("/external-auth")
@require_role(ROLE_OWNER, ROLE_TEMPLATE_ADMIN)
def overview() -> str:
    return render_template("externalauth/providers.html", providers=services.provider_overview())
