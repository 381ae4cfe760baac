"""`slipway login|logout|whoami`, `slipway users ...`, `slipway tokens ...`."""

from __future__ import annotations

import os

import click

from cli.client import (
    SlipwayClient,
    authenticated_client,
    decoded,
    decoded_list,
)
from cli.config import ClientConfig, forget_config, load_config, save_config
from cli.output import ListOutput, list_options
from protocol.codec import JSON
from protocol.publicapi import ApiToken, AuthMethods, ErrorBody, NewApiToken, SessionToken, User
from protocol.values import parse_duration  # the same duration syntax as the server's settings


@click.command()
@click.argument("url", envvar="SLIPWAY_URL")
@click.option("--token", envvar="SLIPWAY_SESSION_TOKEN", help="Use this API or session token instead of a password.")
@click.option("--email", help="Email to sign in with (prompted when missing).")
def login(url: str, token: str | None, email: str | None) -> None:
    """Sign in to the Slipway server at URL and remember it for later commands."""
    url = url.rstrip("/")
    if "://" not in url:
        url = f"http://{url}"
    if not token:
        token = _browser_login(url) if _password_disabled(url) else _password_login(url, email)
    user = SlipwayClient(url, token).get_one(User, "/api/v2/users/me")
    path = save_config(ClientConfig(url=url, token=token))
    click.echo(f"Signed in to {url} as {user.username} ({', '.join(user.roles)}). Session saved in {path}.")


def _password_disabled(url: str) -> bool:
    answer = SlipwayClient(url).request("GET", "/api/v2/users/authmethods", expect=(200, 404))
    if answer is None:
        return False
    return not decoded(AuthMethods, answer, "GET /api/v2/users/authmethods").password.enabled


def _browser_login(url: str) -> str:
    """Single sign-on only: the person signs in with their browser and pastes the token it shows."""
    click.echo("This server signs people in through their identity provider. Open this page, sign in,")
    click.echo(f"and paste the token it shows here:\n\n    {url}/cli-auth\n")
    return str(click.prompt("Token", hide_input=True)).strip()


def _password_login(url: str, email: str | None) -> str:
    anonymous = SlipwayClient(url)
    answer = anonymous.request("GET", "/api/v2/users/first", expect=(200, 404))
    first = decoded(ErrorBody, answer, "GET /api/v2/users/first")
    if first.message.startswith("No user"):
        click.echo("This server has no users yet. Create the first user (the owner).")
        username = click.prompt("Username")
        email = click.prompt("Email")
        password = click.prompt("Password", hide_input=True, confirmation_prompt=True)
        anonymous.post(User, "/api/v2/users/first", {"username": username, "email": email, "password": password})
    else:
        email = email or click.prompt("Email")
        password = click.prompt("Password", hide_input=True)
    return anonymous.post(SessionToken, "/api/v2/users/login", {"email": email, "password": password}).session_token


@click.command()
def logout() -> None:
    """Sign out: revoke the session token and forget it."""
    config = load_config()
    if config is not None and not os.environ.get("SLIPWAY_SESSION_TOKEN"):
        SlipwayClient(config.url, config.token).request("POST", "/api/v2/users/logout", expect=(204, 401))
    forget_config()
    click.echo("Signed out.")


@click.command()
def whoami() -> None:
    """Show who you are signed in as."""
    client = authenticated_client()
    user = client.get_one(User, "/api/v2/users/me")
    click.echo(f"{user.username} <{user.email}> on {client.url} — roles: {', '.join(user.roles)}")


@click.group()
def users() -> None:
    """Manage users (owners only)."""


@users.command("list")
@list_options(
    available=["username", "email", "roles", "status", "created_at", "id", "login_type"],
    default=["username", "email", "roles", "status", "created_at"],
)
def users_list(listing: ListOutput) -> None:
    """List every user."""
    answer = authenticated_client().get("/api/v2/users")
    listing.show(answer, lambda: [_user_row(user) for user in decoded_list(User, answer, "GET /api/v2/users")])


def _user_row(user: User) -> dict[str, object]:
    return {
        "username": user.username,
        "email": user.email,
        "roles": ",".join(role for role in user.roles if role != "member") or "member",
        "status": user.status,
        "created_at": user.created_at,
        "id": user.id,
        "login_type": user.login_type,
    }


@users.command("create")
@click.option("--username", prompt=True)
@click.option("--email", prompt=True)
@click.option("--password", prompt=True, hide_input=True, confirmation_prompt=True)
@click.option("--role", "roles", multiple=True, type=click.Choice(["owner", "template-admin", "user-admin", "member"]))
def users_create(username: str, email: str, password: str, roles: tuple[str, ...]) -> None:
    """Create a user who signs in with a password."""
    user = authenticated_client().post(
        User, "/api/v2/users", {"username": username, "email": email, "password": password, "roles": list(roles)}
    )
    click.echo(f"Created {user.username} ({', '.join(user.roles)}).")


@click.group()
def tokens() -> None:
    """Manage your API tokens."""


@tokens.command("create")
@click.option("--name", required=True, help="A name to recognise the token by.")
@click.option("--lifetime", help="How long it is valid, e.g. 90s, 12h, 30d (server default when omitted).")
def tokens_create(name: str, lifetime: str | None) -> None:
    """Create an API token and print it (it is shown only once)."""
    body: dict[str, JSON] = {"name": name}
    if lifetime:
        try:
            body["lifetime_seconds"] = parse_duration(lifetime)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--lifetime") from exc
    click.echo(authenticated_client().post(NewApiToken, "/api/v2/users/me/tokens", body).token)


@tokens.command("list")
@list_options(
    available=["id", "name", "created_at", "expires_at", "last_used_at"],
    default=["id", "name", "created_at", "expires_at", "last_used_at"],
)
def tokens_list(listing: ListOutput) -> None:
    """List your API tokens (never their secrets)."""
    answer = authenticated_client().get("/api/v2/users/me/tokens")
    listing.show(
        answer, lambda: [token.to_json() for token in decoded_list(ApiToken, answer, "GET /api/v2/users/me/tokens")]
    )


@tokens.command("remove")
@click.argument("name_or_id")
def tokens_remove(name_or_id: str) -> None:
    """Revoke one of your API tokens, by name or id."""
    client = authenticated_client()
    mine = client.get_list(ApiToken, "/api/v2/users/me/tokens")
    matches = [token for token in mine if name_or_id in (token.id, token.name)]
    if not matches:
        raise click.ClickException(f"You have no token named {name_or_id!r}.")
    client.request("DELETE", f"/api/v2/users/me/tokens/{matches[0].id}")
    click.echo(f"Revoked token {matches[0].name}.")
