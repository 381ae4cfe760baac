"""Pages for bringing people in and getting them back in: invitations (sent, listed, revoked, accepted), an admin's
password reset, and "forgot password" by email. Owners and user admins manage; the links' pages are public."""

from __future__ import annotations

from flask import current_app, flash, redirect, render_template, request, url_for
from flask_login import current_user
from werkzeug.wrappers import Response

from app.accounts import mail
from app.audit.recorder import acting_as, user_actor
from app.auth import ratelimit
from app.auth.access import page_user, require_role, sign_in_browser, sign_out_browser
from app.auth.blueprints import page_blueprint
from app.core.config import Settings
from app.core.errors import DomainError, InvalidInput, NotFound
from app.core.pagination import page_of, requested_page
from app.users import invitations, password_resets, services
from app.users.models import ASSIGNABLE_ROLES, ROLE_OWNER, ROLE_USER_ADMIN

bp = page_blueprint("people", __name__, public=("accept_invitation", "forgot_password", "reset_with_link"))


def _settings() -> Settings:
    settings: Settings = current_app.config["SLIPWAY_SETTINGS"]
    return settings


def _field_errors(error: DomainError) -> dict[str, str]:
    return {item["field"]: item["detail"] for item in error.validations} or {"_": error.message}


@bp.route("/users/invitations", methods=["GET", "POST"])
@require_role(ROLE_OWNER, ROLE_USER_ADMIN)
def invitations_page() -> str | tuple[str, int]:
    """Invite by email; without SMTP the link is shown here once, to pass on by hand."""
    form = {key: request.form.get(key, "") for key in ("email", "role")}
    context: dict[str, object] = {}
    status = 200
    if request.method == "POST":
        settings, actor = _settings(), page_user()
        roles = [form["role"]] if form["role"] in ASSIGNABLE_ROLES else []
        try:
            invitation, credential = invitations.invite(actor, form["email"], roles)
            link = invitations.invitation_link(settings.access_url, credential)
            if mail.email_configured(settings):
                mail.send_invitation(settings, invitation, actor, link)
                context["sent_to"] = invitation.email
            else:
                context |= {"new_link": link, "new_link_email": invitation.email}
            form = {"email": "", "role": ""}
        except DomainError as error:
            context["errors"], status = _field_errors(error), error.status
    return _invitations(form, **context), status


def _invitations(form: dict[str, str], **context: object) -> str:
    pending = page_of(invitations.pending_invitations_query(), requested_page(), endpoint="people.invitations_page")
    return render_template(
        "users/invitations.html",
        form=form,
        pending=pending,
        email_configured=mail.email_configured(_settings()),
        lifetime_days=invitations.INVITATION_LIFETIME.days,
        **({"errors": {}} | context),
    )


@bp.post("/users/invitations/<invitation_id>/revoke")
@require_role(ROLE_OWNER, ROLE_USER_ADMIN)
def revoke_invitation(invitation_id: str) -> Response:
    invitations.revoke_invitation(invitation_id)
    flash("Invitation revoked: its link no longer works.", "success")
    return redirect(url_for("people.invitations_page"))


@bp.route("/invite/<credential>", methods=["GET", "POST"])
def accept_invitation(credential: str) -> Response | str | tuple[str, int]:
    """The invited person picks a username (the email's first part, to start with) and a password, and is in."""
    try:
        invitation = invitations.open_invitation(credential)
    except DomainError as error:
        return render_template("users/invitation_gone.html", error=error.message), error.status
    form = {"username": request.form.get("username", invitations.suggested_username(invitation.email))}
    if request.method == "GET":
        return render_template("users/accept_invitation.html", invitation=invitation, form=form, errors={})
    try:
        password = request.form.get("password", "")
        if password != request.form.get("confirm_password", ""):
            raise InvalidInput(
                "The passwords do not match.",
                validations=[{"field": "confirm_password", "detail": "The passwords do not match."}],
            )
        user = invitations.accept_invitation(credential, form["username"], password)
    except DomainError as error:
        page = render_template(
            "users/accept_invitation.html", invitation=invitation, form=form, errors=_field_errors(error)
        )
        return page, error.status
    if current_user.is_authenticated:  # someone else's browser: their session ends before the new one starts
        sign_out_browser()
    sign_in_browser(user)
    flash(f"Welcome, {user.username}. Your account is ready.", "success")
    return redirect(url_for("workspaces.index"))


@bp.route("/users/<user_id>/password", methods=["GET", "POST"])
@require_role(ROLE_OWNER, ROLE_USER_ADMIN)
def reset_password(user_id: str) -> Response | str | tuple[str, int]:
    """An admin sets a temporary password; the person is signed out and chooses their own at next sign-in."""
    user = services.get_user(user_id)
    if request.method == "GET":
        return render_template("users/reset_password.html", user=user, error="")
    try:
        if user.id == page_user().id:
            raise InvalidInput("Change your own password on your Account page, with your current one.")
        services.admin_set_password(page_user(), user, request.form.get("password", ""))
    except DomainError as error:
        return render_template("users/reset_password.html", user=user, error=error.message), error.status
    flash(
        f"{user.username}'s password was reset and their sessions ended. Give them the new password: they will "
        "choose their own when they next sign in.",
        "success",
    )
    return redirect(url_for("users.index") if page_user().is_owner else url_for("people.invitations_page"))


@bp.post("/users/password-reset")
@require_role(ROLE_OWNER, ROLE_USER_ADMIN)
def reset_by_name() -> Response | tuple[str, int]:
    """The Invite people page's reset, for user admins (who have no Users page): the person by username or email."""
    login = request.form.get("user", "")
    try:
        user = services.find_by_login(login)
        if user is None:
            raise NotFound(f"Nobody signs in as {login.strip()!r}: give a username or an email.")
        if user.id == page_user().id:
            raise InvalidInput("Change your own password on your Account page, with your current one.")
        services.admin_set_password(page_user(), user, request.form.get("password", ""))
    except DomainError as error:
        return _invitations({"email": "", "role": ""}, reset_error=error.message, reset_user=login), error.status
    flash(
        f"{user.username}'s password was reset and their sessions ended. Give them the new password: they will "
        "choose their own when they next sign in.",
        "success",
    )
    return redirect(url_for("people.invitations_page"))


@bp.route("/forgot-password", methods=["GET", "POST"])
def forgot_password() -> str | tuple[str, int]:
    """The same answer whether or not the email has an account; without SMTP, the page says whom to ask."""
    settings = _settings()
    if request.method == "GET" or not mail.email_configured(settings):
        return render_template("auth/forgot_password.html", email_configured=mail.email_configured(settings))
    email = request.form.get("email", "").strip()
    try:
        if "@" not in email:
            raise InvalidInput("Enter the email address of your account.")
        ratelimit.count_reset_request(request.remote_addr or "unknown", email)
    except DomainError as error:
        page = render_template("auth/forgot_password.html", email_configured=True, error=error.message)
        return page, error.status
    started = password_resets.start_reset(email)
    if started is not None:
        user, credential = started
        link = f"{settings.access_url.rstrip('/')}{url_for('people.reset_with_link', credential=credential)}"
        mail.send_reset_in_background(settings, user, link)
    return render_template("auth/forgot_password.html", email_configured=True, requested=email)


@bp.route("/reset-password/<credential>", methods=["GET", "POST"])
def reset_with_link(credential: str) -> Response | str | tuple[str, int]:
    try:
        reset = password_resets.open_reset(credential)
    except DomainError as error:
        return render_template("auth/reset_password.html", gone=error.message, errors={}), error.status
    if request.method == "GET":
        return render_template("auth/reset_password.html", user=reset.user, errors={})
    try:
        with acting_as(user_actor(reset.user)):  # the audit log names the person, though nobody is signed in
            user = password_resets.finish_reset(
                credential, request.form.get("password", ""), request.form.get("confirm_password", "")
            )
    except DomainError as error:
        page = render_template("auth/reset_password.html", user=reset.user, errors=_field_errors(error))
        return page, error.status
    if current_user.is_authenticated:
        sign_out_browser()
    sign_in_browser(user)
    flash("Password changed. Every other session of yours was signed out.", "success")
    return redirect(url_for("workspaces.index"))
