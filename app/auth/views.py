"""Sign-in, sign-out and the first-user setup page."""

from __future__ import annotations

from flask import current_app, flash, redirect, render_template, request, url_for
from flask_login import current_user
from werkzeug.wrappers import Response

from app.auth import ratelimit
from app.auth.access import page_user, sign_in_browser, sign_out_browser
from app.auth.blueprints import page_blueprint
from app.auth.oidc_views import forget_linking, provider_logout_url
from app.auth.redirects import safe_next
from app.core.errors import DomainError, InvalidInput
from app.users import services

bp = page_blueprint("auth", __name__, public=("login", "setup", "logout"))


@bp.route("/login", methods=["GET", "POST"])
def login() -> Response | str | tuple[str, int]:
    settings = current_app.config["SLIPWAY_SETTINGS"]
    if services.user_count() == 0 and not settings.disable_password_auth:
        return redirect(url_for("auth.setup"))
    if current_user.is_authenticated:
        return redirect(safe_next(request.args.get("next")))
    if request.method == "GET":
        return render_template("auth/login.html", email="")
    # One field takes a username or an email (the form's name stays "email", as clients and password managers know).
    email, password = request.form.get("email", ""), request.form.get("password", "")
    try:
        user = ratelimit.sign_in_with_password(settings, request.remote_addr or "unknown", email, password)
    except DomainError as error:
        return render_template("auth/login.html", email=email, error=error.message), error.status
    sign_in_browser(user)
    return redirect(safe_next(request.args.get("next")))


@bp.post("/logout")
def logout() -> Response:
    sign_out_browser()
    forget_linking()
    return _signed_out("You have signed out.")


@bp.post("/logout/everywhere")
def logout_everywhere() -> Response:
    """End every browser session and session token of the signed-in person (named API tokens stay)."""
    services.sign_out_everywhere(page_user())
    sign_out_browser()
    forget_linking()
    return _signed_out("You have signed out everywhere: every browser and CLI session of yours has ended.")


def _signed_out(message: str) -> Response:
    provider_logout = provider_logout_url()  # signed in through the provider: end its session too
    flash(message, "info")
    return redirect(provider_logout or url_for("auth.login"))


@bp.route("/setup", methods=["GET", "POST"])
def setup() -> Response | str | tuple[str, int]:
    """Create the first user, who becomes the owner. Gone for good once any user exists."""
    if services.user_count() > 0:
        return redirect(url_for("auth.login"))
    form = {key: request.form.get(key, "") for key in ("username", "email", "password")}
    if request.method == "GET":
        return render_template("auth/setup.html", form=form, errors={})
    try:
        user = services.create_first_user(form["username"], form["email"], form["password"])
    except DomainError as error:
        errors = {item["field"]: item["detail"] for item in error.validations} or {"_": error.message}
        return render_template("auth/setup.html", form=form, errors=errors), error.status
    sign_in_browser(user)
    flash(
        f"Welcome, {user.username}. You are the owner of this Slipway deployment: invite your team from Users → "
        "Invite people.",
        "success",
    )
    return redirect(url_for("workspaces.index"))


@bp.route("/password/change", methods=["GET", "POST"])
def change_password() -> Response | str | tuple[str, int]:
    """Where a person whose password an admin chose is held until they choose their own (any other page sends them
    here: app/auth/blueprints.py); anyone else may use it too."""
    user = page_user()
    next_page = safe_next(request.args.get("next"))
    if request.method == "GET":
        return render_template("auth/change_password.html", next_page=next_page, error="")
    try:
        if request.form.get("new_password", "") != request.form.get("confirm_password", ""):
            raise InvalidInput("The new passwords do not match.")
        services.change_password(user, request.form.get("current_password", ""), request.form.get("new_password", ""))
    except DomainError as error:
        page = render_template("auth/change_password.html", next_page=next_page, error=error.message)
        return page, error.status
    sign_in_browser(user)  # every session just ended, this one included: this browser starts a new one
    flash("Password changed. Your other sessions and session tokens were signed out.", "success")
    return redirect(next_page)
