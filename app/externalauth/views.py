"""Pages: linking a Git provider (OAuth2 authorization code with state and PKCE, or the device flow), unlinking,
the Git SSH key, and the admins' overview of providers."""

from __future__ import annotations

import time

from flask import flash, redirect, render_template, request, url_for
from werkzeug.wrappers import Response

from app.auth.access import current_browser_session_id, page_user, require_role
from app.auth.blueprints import page_blueprint
from app.auth.redirects import safe_next
from app.core.errors import DomainError, Unauthorized
from app.externalauth import flows, oauth, services
from app.users.models import ROLE_OWNER, ROLE_TEMPLATE_ADMIN

bp = page_blueprint("externalauth", __name__)


def _problem(title: str, error: DomainError, provider_id: str) -> tuple[str, int]:
    return render_template("externalauth/problem.html", title=title, message=error.message, provider_id=provider_id), (
        error.status
    )


def _browser_session() -> str:
    """This browser's server-side session, which the flows under way belong to (pages always have one)."""
    page_user()
    browser_session_id = current_browser_session_id()
    if browser_session_id is None:
        raise Unauthorized("Sign in again to link a Git provider.")
    return browser_session_id


@bp.get("/external-auth/<provider_id>")
def start(provider_id: str) -> Response | tuple[str, int]:
    """Link (or relink): off to the provider with a fresh state and PKCE verifier kept on the server for this
    person in this browser (app/externalauth/flows.py)."""
    target = services.provider(provider_id)
    back = safe_next(request.args.get("redirect") or url_for("users.account") + "#git-providers")
    if target.device_flow:
        return redirect(url_for("externalauth.device", provider_id=provider_id, redirect=back))
    verifier, challenge = oauth.new_pkce_pair()
    flow = flows.Flow(page_user().id, provider_id, verifier, back, time.time() + flows.FLOW_SECONDS)
    try:
        state = flows.begin(_browser_session(), flow)
    except DomainError as error:
        return _problem("Linking is not possible right now", error, provider_id)
    return redirect(
        oauth.authorization_url(
            target, redirect_uri=services.callback_url(provider_id), state=state, challenge=challenge
        )
    )


@bp.get("/external-auth/<provider_id>/callback")
def callback(provider_id: str) -> Response | tuple[str, int]:
    target = services.provider(provider_id)
    try:
        # Used once: a replayed callback finds no state; one started by someone else, or before a sign-out, neither.
        flow = flows.take(_browser_session(), page_user().id, provider_id, request.args.get("state", "")[:256])
    except DomainError as error:
        return _problem("Linking is not possible right now", error, provider_id)
    if flow is None:
        return render_template(
            "externalauth/problem.html",
            title="This link was refused",
            message="This sign-in was not started by you from this browser, took too long, or was already used. "
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
            verifier=flow.secret,
        )
    except oauth.ProviderUnavailable as error:
        services.record_health(target, error.why)
        return _problem(f"{target.display_name} is not answering", error, provider_id)
    except oauth.TokenRefused as error:
        return _problem(f"{target.display_name} did not link", error, provider_id)
    services.store_tokens(page_user(), target, tokens)
    flash(f"Linked your {target.display_name} account.", "success")
    return redirect(safe_next(flow.back))


@bp.get("/external-auth/<provider_id>/device")
def device(provider_id: str) -> Response | str | tuple[str, int]:
    """GitHub's device flow: a code to enter at the provider; the page then polls until it is approved."""
    target = services.provider(provider_id)
    if not target.device_flow:
        return redirect(url_for("externalauth.start", provider_id=provider_id))
    back = safe_next(request.args.get("redirect") or url_for("users.account") + "#git-providers")
    try:
        code = oauth.start_device_flow(target)
        flow = flows.Flow(page_user().id, provider_id, code.device_code, back, code.expires_at.timestamp())
        flows.begin_device(_browser_session(), flow)
    except oauth.ProviderUnavailable as error:
        services.record_health(target, error.why)
        return _problem(f"{target.display_name} is not answering", error, provider_id)
    except DomainError as error:
        return _problem(f"{target.display_name} is not answering", error, provider_id)
    return render_template("externalauth/device.html", provider=target, code=code, back=back)


@bp.post("/external-auth/<provider_id>/device")
def device_poll(provider_id: str) -> str | tuple[str, int]:
    """htmx, every few seconds: has the person approved the code yet?"""
    target = services.provider(provider_id)
    user, browser_session_id = page_user(), _browser_session()
    status = "pending"
    message = ""
    try:
        pending = flows.device_flow(browser_session_id, user.id, provider_id)
        if pending is None:
            status, message = "expired", "The code expired. Reload the page for a new one."
        else:
            tokens = oauth.poll_device_flow(target, pending.secret)
            # One poll stores the tokens: a second that saw the approval too finds the flow gone.
            if tokens is not None and flows.end_device(browser_session_id, provider_id):
                services.store_tokens(user, target, tokens)
                status, message = "linked", f"Linked your {target.display_name} account."
    except DomainError as error:
        status, message = "failed", error.message
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
