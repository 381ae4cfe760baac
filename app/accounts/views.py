"""Pages: user administration (owners) and the signed-in user's account (password, API tokens)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from flask import current_app, flash, redirect, render_template, request, url_for
from sqlalchemy import Select
from werkzeug.wrappers import Response

from app.auth.access import current_browser_session_id, page_user, require_role, sign_in_browser
from app.auth.blueprints import page_blueprint
from app.core.errors import DomainError, InvalidInput
from app.core.pagination import Page, page_of, requested_page, requested_position
from app.core.schedule_words import FieldError, ScheduleForm, zone_groups
from app.core.validation import FieldErrors
from app.externalauth import services as external_auth
from app.groups.services import groups_of_users
from app.lifecycle import settings as lifecycle_settings
from app.notifications import services as notifications
from app.organizations.models import DEFAULT_ORGANIZATION_ID
from app.users import services
from app.users.browser_sessions import browser_sessions_query, end_browser_session_of
from app.users.models import (
    ASSIGNABLE_ROLES,
    ROLE_AUDITOR,
    ROLE_MEMBER,
    ROLE_OWNER,
    ROLE_TEMPLATE_ADMIN,
    ROLE_USER_ADMIN,
    STATUS_ACTIVE,
    STATUS_SUSPENDED,
    User,
)
from app.users.search import listed_users
from app.users.tokens import api_tokens_query, create_api_token, revoke_api_token
from app.usersecrets import services as user_secrets
from app.usersecrets.services import SecretFields
from app.workspaces import quotas
from protocol.values import parse_duration

bp = page_blueprint("users", __name__)


def _field_errors(error: DomainError) -> dict[str, str]:
    return {item["field"]: item["detail"] for item in error.validations} or {"_": error.message}


@bp.route("/users", methods=["GET", "POST"])
@require_role(ROLE_OWNER)
def index() -> str | tuple[str, int] | Response:
    form = {key: request.form.get(key, "") for key in ("username", "email", "password", "role")}
    # Ticked unless the owner unticked it: the password is one the owner chose and passes on by hand.
    must_change = request.method == "GET" or request.form.get("must_change_password") == "on"
    errors: dict[str, str] = {}
    status = 200
    if request.method == "POST":
        roles = [form["role"]] if form["role"] in ASSIGNABLE_ROLES else []
        try:
            user = services.create_user(
                form["username"], form["email"], form["password"], roles, must_change_password=must_change
            )
        except DomainError as error:
            errors, status = _field_errors(error), error.status
        else:
            then = " They choose their own password when they first sign in." if must_change else ""
            flash(f"Created {user.username}. Give them their username and password to sign in.{then}", "success")
            return redirect(url_for("users.index"))
    search, sort = request.args.get("q", "").strip(), request.args.get("sort", "")
    try:
        page = page_of(listed_users(search, sort), requested_position(), endpoint="users.index")
        search_error = ""
    except InvalidInput as error:  # the box keeps what was typed, with what is wrong with it
        page, search_error, status = Page.empty(), error.message, 400
    return (
        render_template(
            "users/index.html",
            page=page,
            search=search,
            search_error=search_error,
            sort=sort or "username",
            form=form,
            must_change=must_change,
            errors=errors,
            roles=ASSIGNABLE_ROLES,
            user_groups=groups_of_users([user.id for user in page.rows], DEFAULT_ORGANIZATION_ID),
            user_quotas=quotas.quotas_of_users([user.id for user in page.rows]),
        ),
        status,
    )


# How the confirmation and the message after it name each role.
ROLE_PHRASES = {
    ROLE_OWNER: "an owner",
    ROLE_TEMPLATE_ADMIN: "a template admin",
    ROLE_USER_ADMIN: "a user admin",
    ROLE_AUDITOR: "an auditor",
    ROLE_MEMBER: "a member",
}
STATUS_OUTCOMES = {STATUS_SUSPENDED: "was suspended", STATUS_ACTIVE: "was activated"}


@bp.post("/users/<user_id>")
@require_role(ROLE_OWNER)
def update(user_id: str) -> str | tuple[str, int] | Response:
    """Change a user's role or status in two steps: the row's form brings a confirmation page (nothing changes yet,
    but what would be refused is said at once), whose form sends ``confirmed`` back; then the users page says what
    happened."""
    actor, user = page_user(), services.get_user(user_id)
    role, status = request.form.get("role") or None, request.form.get("status") or None
    roles = None if role is None else [role]
    confirming = request.form.get("confirmed") != "yes"
    try:
        if role is None and status is None:
            raise InvalidInput("Choose a role or a status for the user.")
        if confirming:
            services.check_user_update(actor, user, roles=roles, status=status)
        else:
            services.update_user(actor, user.id, roles=roles, status=status)
    except DomainError as error:
        return _confirm_page(user, role, status, error=error.message), error.status
    if confirming:
        return _confirm_page(user, role, status, error="")
    done = ([f"is now {ROLE_PHRASES[role]}"] if role else []) + ([STATUS_OUTCOMES[status]] if status else [])
    flash(f"{user.username} {' and '.join(done)}.", "success")
    return redirect(url_for("users.index"))


def _confirm_page(user: User, role: str | None, status: str | None, *, error: str) -> str:
    current_role = next((name for name in ASSIGNABLE_ROLES if name in user.roles), ROLE_MEMBER)
    return render_template(
        "users/confirm.html",
        user=user,
        role=role,
        status=status,
        error=error,
        unchanged=(role is None or role == current_role) and (status is None or status == user.status),
        role_phrases=ROLE_PHRASES,
    )


@bp.post("/users/<user_id>/oidc-link")
@require_role(ROLE_OWNER)
def allow_oidc_link(user_id: str) -> str:
    """One row changes in place (htmx): allow, or withdraw, linking the account by its next single sign-on."""
    error = None
    try:
        user = services.allow_oidc_linking(user_id, request.form.get("allow") == "true")
    except DomainError as exc:
        user, error = services.get_user(user_id), exc.message
    return render_template(
        "users/_partials/row.html", user=user, roles=ASSIGNABLE_ROLES, error=error,
        user_groups=groups_of_users([user.id], DEFAULT_ORGANIZATION_ID), user_quotas=quotas.quotas_of_users([user.id]),
    )  # fmt: skip


@bp.get("/account")
def account() -> str:
    return _account_page()


def _account_page(**context: object) -> str:
    user = page_user()
    return render_template(
        "users/account.html",
        tokens=_account_list(api_tokens_query(user), "tokens_page"),
        browser_sessions=_account_list(browser_sessions_query(user), "sessions_page"),
        this_session_id=current_browser_session_id(),
        quiet_hours=lifecycle_settings.quiet_hours_of(user),
        zones=zone_groups(),
        preferences=notifications.preferences(user.id),
        events=notifications.EVENTS,
        inbox=notifications.inbox(user.id),
        git_providers=external_auth.link_statuses(user),
        git_ssh_public_key=external_auth.git_ssh_key(user).public_key,
        secrets=_account_list(user_secrets.secrets_query(user), "secrets_page"),
        **({"secret_form": {}, "secret_errors": {}, "quiet_form": _quiet_form(user), "quiet_errors": {}} | context),
    )


def _quiet_form(user: User) -> ScheduleForm:
    """Quiet hours as the form shows them; never set, the zone is left for the page's script to take from the
    browser (the default, midnight UTC, is no one's choice)."""
    form = ScheduleForm.of(lifecycle_settings.quiet_hours_of(user))
    return replace(form, zone_saved=user.quiet_hours_schedule is not None)


def _account_list(query: Select[Any], param: str) -> Page:
    """One of the account page's lists, a page at a time: each turns its own pages (``?tokens_page=`` ...)."""
    return page_of(query, requested_page(param), endpoint="users.account", param=param)


@bp.post("/account/quiet-hours")
def set_quiet_hours() -> Response | tuple[str, int]:
    """The zone and a time (every day), or a daily cron under Advanced; refused, the form keeps what was sent."""
    form = ScheduleForm.posted(request.form, every_day=True)
    try:
        text = form.checked(daily_only=True)
        if text is None:
            raise FieldError("start_time", "Give the time your quiet hours start, e.g. 22:00.")
        lifecycle_settings.set_quiet_hours(page_user(), text)
    except FieldError as error:
        return _account_page(quiet_form=form, quiet_errors={error.field: str(error)}), 400
    except DomainError as error:
        return _account_page(quiet_form=form, quiet_errors={"_": error.message}), error.status
    flash("Quiet hours saved.", "success")
    return redirect(url_for("users.account") + "#quiet-hours")


@bp.post("/account/notifications")
def set_notification_preferences() -> Response:
    # A checkbox sends a value only when ticked: every event not sent is off.
    chosen = {event: request.form.get(event) == "on" for event in notifications.EVENTS}
    notifications.set_preferences(page_user().id, chosen)
    flash("Notification preferences saved.", "success")
    return redirect(url_for("users.account") + "#notifications")


@bp.post("/account/inbox/read")
def mark_inbox_read() -> Response:
    notifications.mark_read(page_user().id, None)
    return redirect(url_for("users.account") + "#inbox")


@bp.post("/account/password")
def change_password() -> Response | tuple[str, int]:
    user = page_user()
    try:
        if request.form.get("new_password", "") != request.form.get("confirm_password", ""):
            raise InvalidInput("The new passwords do not match.")
        services.change_password(user, request.form.get("current_password", ""), request.form.get("new_password", ""))
    except DomainError as error:
        return _account_page(password_error=error.message), error.status
    # Every session just ended, this one included: this browser starts a new one.
    sign_in_browser(user)
    flash("Password changed. Your other sessions and session tokens were signed out.", "success")
    return redirect(url_for("users.account"))


SECRET_FORM_FIELDS = ("name", "value", "env_name", "file_path", "description")


@bp.post("/account/secrets")
def create_secret() -> Response | tuple[str, int]:
    form = {key: request.form.get(key, "") for key in SECRET_FORM_FIELDS}
    fields = SecretFields(**form)
    try:
        errors = FieldErrors()
        user_secrets.check_fields(fields, errors, creating=True)
        errors.raise_if_any()
        secret = user_secrets.create_secret(page_user(), fields)
    except DomainError as error:
        form["value"] = ""  # a secret is never sent back to the browser, even one just typed
        return _account_page(secret_form=form, secret_errors=_field_errors(error)), error.status
    flash(f"Secret {secret.name} saved. Its value is not shown again.", "success")
    return redirect(url_for("users.account") + "#secrets")


@bp.post("/account/secrets/<name>/delete")
def delete_secret(name: str) -> Response:
    user_secrets.delete_secret(page_user(), name)
    flash(f"Secret {name} deleted.", "success")
    return redirect(url_for("users.account") + "#secrets")


@bp.post("/account/tokens")
def create_token() -> str | tuple[str, int]:
    settings = current_app.config["SLIPWAY_SETTINGS"]
    lifetime_text = request.form.get("lifetime", "").strip()
    try:
        try:
            lifetime = parse_duration(lifetime_text) if lifetime_text else None
        except ValueError as exc:
            raise InvalidInput(str(exc)) from exc
        key, secret = create_api_token(
            page_user(),
            request.form.get("name", ""),
            lifetime,
            default=settings.default_token_lifetime,
            maximum=settings.max_token_lifetime,
        )
    except DomainError as error:
        return _account_page(token_error=error.message), error.status
    return _account_page(new_token=secret, new_token_name=key.name)


@bp.post("/account/tokens/<token_id>/delete")
def delete_token(token_id: str) -> Response:
    revoke_api_token(page_user(), token_id)
    flash("Token revoked.", "success")
    return redirect(url_for("users.account"))


@bp.post("/account/sessions/<session_id>/delete")
def end_session(session_id: str) -> Response:
    end_browser_session_of(page_user(), session_id)
    flash("That browser was signed out.", "success")
    return redirect(url_for("users.account"))
