"""People's links with Git providers: linking, fresh tokens for builds and workspaces, unlinking, health.

A person only ever gets their own tokens: every function here takes the user whose link it reads, and the
callers pass the signed-in person, a build's workspace owner, or an agent's workspace owner — never a user id
from a request. No reply but the agent's and the build's carries a token.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable, Sequence
from datetime import timedelta

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from flask import current_app
from redis.exceptions import LockError
from sqlalchemy import func, select

from app.core.columns import rfc3339, utcnow
from app.core.config import Settings
from app.core.errors import InvalidInput, NotFound
from app.core.extensions import db
from app.core.external_auth_config import ExternalAuthProvider
from app.core.redis_client import get_redis
from app.externalauth import oauth
from app.externalauth.models import ExternalAuthLink, GitSSHKey
from app.users.models import User
from protocol.agentapi import ExternalAuthReply
from protocol.codec import JsonObject
from protocol.resources import ExternalAuth

log = logging.getLogger("slipway.externalauth")
# A token is refreshed this long before it expires, so a build or a git push never starts with one about to lapse.
REFRESH_MARGIN = timedelta(minutes=5)
# Listings re-ask the provider whether a token is still good at most this often.
REVALIDATE_AFTER = timedelta(minutes=10)
# How long a workspace's git waits for its person to link in the browser (the agent's request is held this long).
LISTEN_SECONDS = 50
LISTEN_POLL_SECONDS = 1.0
HEALTH_KEY = "slipway:external-auth:health:{}"
REFRESH_LOCK = "slipway:external-auth:refresh:{}"


def _settings() -> Settings:
    settings: Settings = current_app.config["SLIPWAY_SETTINGS"]
    return settings


def providers() -> tuple[ExternalAuthProvider, ...]:
    return _settings().external_auth


def configured(provider_id: str) -> ExternalAuthProvider | None:
    return next((item for item in providers() if item.id == provider_id), None)


def provider(provider_id: str) -> ExternalAuthProvider:
    found = configured(provider_id)
    if found is None:
        raise NotFound(f"No Git provider {provider_id!r} is configured on this server.")
    return found


def callback_url(provider_id: str) -> str:
    return f"{_settings().access_url}/external-auth/{provider_id}/callback"


def link_url(provider_id: str) -> str:
    return f"{_settings().access_url}/external-auth/{provider_id}"


def _link(user: User, provider_id: str) -> ExternalAuthLink | None:
    return db.session.scalar(
        select(ExternalAuthLink).where(ExternalAuthLink.user_id == user.id, ExternalAuthLink.provider_id == provider_id)
    )


def store_tokens(user: User, target: ExternalAuthProvider, tokens: oauth.TokenSet) -> ExternalAuthLink:
    """A new link, or a relink replacing the old tokens."""
    link = _link(user, target.id) or ExternalAuthLink(user_id=user.id, provider_id=target.id)
    _apply(link, tokens)
    db.session.add(link)
    db.session.commit()
    record_health(target, "")
    log.info("%s linked %s", user.username, target.id)
    return link


def _apply(link: ExternalAuthLink, tokens: oauth.TokenSet) -> None:
    link.access_token = tokens.access_token
    link.refresh_token = tokens.refresh_token
    link.token_extra = json.dumps(tokens.extra)
    link.expires_at = tokens.expires_at
    link.validate_error = ""
    link.validated_at = utcnow()
    link.updated_at = utcnow()


def fresh_link(user: User, target: ExternalAuthProvider, *, revalidate: bool = False) -> ExternalAuthLink | None:
    """The person's link with a token good for a while yet (refreshed when it is about to expire), or None when
    they have none. A refused refresh marks the link invalid (it stays, so the page can offer Relink); a provider
    that is down leaves the old token in place and is recorded in its health."""
    link = _link(user, target.id)
    if link is None or link.validate_error:
        return link
    now = utcnow()
    try:
        if link.expires_at is not None and link.expires_at - REFRESH_MARGIN <= now:
            if link.refresh_token and not target.no_refresh:
                _refresh(link, target)
            elif link.expires_at <= now:
                raise oauth.TokenRefused(target, "the token expired and cannot be refreshed")
        elif revalidate and (link.validated_at is None or now - link.validated_at >= REVALIDATE_AFTER):
            oauth.validate(target, link.access_token)
            link.validated_at = now
            db.session.commit()
            record_health(target, "")
    except oauth.TokenRefused as exc:
        link.validate_error = exc.why
        db.session.commit()
    except oauth.ProviderUnavailable as exc:
        record_health(target, exc.why)
    return link


def _refresh(link: ExternalAuthLink, target: ExternalAuthProvider) -> None:
    """One refresh at a time per link, on every replica: providers that rotate refresh tokens (GitLab, Gitea …)
    accept each one once, so a second, concurrent refresh (git fetching submodules in parallel, a build starting
    meanwhile) would fail and mark the link invalid. Whoever waited takes the token the first one got."""
    seen = link.updated_at
    try:
        with get_redis().lock(REFRESH_LOCK.format(link.id), timeout=30, blocking_timeout=25):
            db.session.refresh(link)
            if link.updated_at != seen or link.validate_error or not link.refresh_token:
                return
            _apply(link, oauth.refresh(target, link.refresh_token))
            db.session.commit()
    except LockError:
        raise oauth.ProviderUnavailable(target, "another refresh of this token did not finish") from None
    record_health(target, "")
    log.info("refreshed a %s token (link %s)", target.id, link.id)


def link_statuses(user: User) -> list[JsonObject]:
    """API.md: every provider, and whether the person's link with it works."""
    rows: list[JsonObject] = []
    for target in providers():
        link = fresh_link(user, target, revalidate=True)
        rows.append(
            {
                "id": target.id,
                "type": target.type,
                "display_name": target.display_name,
                "display_icon": target.display_icon,
                "authenticated": link is not None and not link.validate_error,
                "linked": link is not None,
                "validate_error": link.validate_error if link is not None else "",
                "device_flow": target.device_flow,
                "expires_at": rfc3339(link.expires_at) if link is not None else None,
            }
        )
    return rows


def unlink(user: User, provider_id: str) -> None:
    """Forget the link, revoking its tokens at the provider where it can: a provider that is down must not keep
    someone linked here against their will, so a failed revocation is logged and the link goes anyway."""
    target = provider(provider_id)
    link = _link(user, provider_id)
    if link is None:
        raise NotFound(f"You have not linked {target.display_name}.")
    for token in (link.refresh_token, link.access_token):
        if token:
            try:
                oauth.revoke(target, token)
            except oauth.ProviderUnavailable as exc:
                record_health(target, exc.why)
                log.warning("could not revoke %s's %s token: %s", user.username, provider_id, exc.why)
    db.session.delete(link)
    db.session.commit()
    log.info("%s unlinked %s", user.username, provider_id)


def required_by(needs: Iterable[ExternalAuth]) -> list[ExternalAuth]:
    return [need for need in needs if not need.optional]


def require_links(user: User, needs: Sequence[ExternalAuth]) -> None:
    """Refuse (400 naming ``external_auth.<id>``) a workspace whose template needs a provider the person has not
    linked, before any job is queued: a build would only fail later, after minutes of Terraform."""
    problems = []
    for need in required_by(needs):
        target = configured(need.id)
        if target is None:
            detail = f"The template needs Git provider {need.id!r}, which this server does not have: ask an admin."
        else:
            # No call to the provider here (the executor starts workspaces too): an expiring token is refreshed
            # when the build asks for it.
            link = _link(user, target.id)
            if link is None:
                detail = f"Link your {target.display_name} account first: {link_url(target.id)}"
            elif link.validate_error:
                detail = f"Your {target.display_name} link is no longer valid ({link.validate_error}): relink it."
            else:
                continue
        problems.append({"field": f"external_auth.{need.id}", "detail": detail})
    if problems:
        raise InvalidInput(
            "This template needs Git providers you have not linked: "
            + ", ".join(problem["field"].removeprefix("external_auth.") for problem in problems),
            validations=problems,
        )


def build_tokens(user: User, needs: Sequence[ExternalAuth]) -> dict[str, str]:
    """Fresh access tokens for a build (``data.coder_external_auth.<x>.access_token``): only the owner's, only the
    providers the version declares, and none for a link that is missing or invalid (optional ones)."""
    tokens = {}
    for need in needs:
        target = configured(need.id)
        link = fresh_link(user, target) if target is not None else None
        if link is not None and not link.validate_error:
            tokens[need.id] = link.access_token
    return tokens


def stored_tokens(user_id: str) -> list[str]:
    """Every token of a person, for masking in build logs."""
    links = db.session.scalars(select(ExternalAuthLink).where(ExternalAuthLink.user_id == user_id))
    return [token for link in links for token in (link.access_token, link.refresh_token) if token]


def agent_token(user: User, *, match: str = "", provider_id: str = "", listen: bool = False) -> ExternalAuthReply:
    """API.md: for a workspace's git, the token of the provider serving ``match`` (or named ``id``), or the URL
    where the person links it; with ``listen`` the request waits up to ``LISTEN_SECONDS`` for them to link."""
    if provider_id:
        target = provider(provider_id)
    elif match:
        found = next((item for item in providers() if item.matches(match)), None)
        if found is None:
            raise NotFound(f"No Git provider on this server serves {match}. Ask an admin to configure one.")
        target = found
    else:
        raise InvalidInput("Give the remote URL (match) or the provider id (id).")
    deadline = time.monotonic() + (LISTEN_SECONDS if listen else 0)
    while True:
        link = fresh_link(user, target)
        if link is not None and not link.validate_error:
            extra = json.loads(link.token_extra or "{}")
            return ExternalAuthReply(
                id=target.id,
                type=target.type,
                display_name=target.display_name,
                access_token=link.access_token,
                username=target.git_username,
                password=link.access_token,
                token_extra={
                    str(key): value if isinstance(value, str) else json.dumps(value) for key, value in extra.items()
                },
            )
        if time.monotonic() >= deadline:
            return ExternalAuthReply(
                id=target.id, type=target.type, display_name=target.display_name, url=link_url(target.id)
            )
        db.session.rollback()  # end the transaction: the next look sees a link committed meanwhile
        time.sleep(LISTEN_POLL_SECONDS)


def record_health(target: ExternalAuthProvider, error: str) -> None:
    key = HEALTH_KEY.format(target.id)
    try:
        if error:
            get_redis().set(key, json.dumps({"error": error, "at": rfc3339(utcnow())}), ex=7 * 86400)
        else:
            get_redis().delete(key)
    except Exception:  # health is advice: Redis being away must not fail a link
        log.warning("could not record %s's health", target.id)


def provider_overview() -> list[JsonObject]:
    """Admins: each provider, how many people linked it, and its last error (never anyone's token)."""
    counts = dict(
        db.session.execute(
            select(ExternalAuthLink.provider_id, func.count()).group_by(ExternalAuthLink.provider_id)
        ).all()
    )
    invalid = dict(
        db.session.execute(
            select(ExternalAuthLink.provider_id, func.count())
            .where(ExternalAuthLink.validate_error != "")
            .group_by(ExternalAuthLink.provider_id)
        ).all()
    )
    rows: list[JsonObject] = []
    for target in providers():
        raw = get_redis().get(HEALTH_KEY.format(target.id))
        health = json.loads(raw) if raw else {}
        rows.append(
            {
                "id": target.id,
                "type": target.type,
                "display_name": target.display_name,
                "display_icon": target.display_icon,
                "regex": target.regex,
                "device_flow": target.device_flow,
                "links": counts.get(target.id, 0),
                "invalid_links": invalid.get(target.id, 0),
                "healthy": not health,
                "last_error": health.get("error", ""),
                "last_error_at": health.get("at"),
            }
        )
    return rows


def git_ssh_key(user: User, *, regenerate: bool = False) -> GitSSHKey:
    """The person's Git SSH key, made on first use (ed25519). Regenerating replaces it: the old public key must
    then be removed at the providers."""
    key = db.session.get(GitSSHKey, user.id)
    if key is None or regenerate:
        private = Ed25519PrivateKey.generate()
        private_text = private.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
        ).decode()
        public_text = (
            private.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
        ).decode() + f" slipway-{user.username}"
        if key is None:
            key = GitSSHKey(user_id=user.id)
            db.session.add(key)
        key.private_key, key.public_key, key.updated_at = private_text, public_text, utcnow()
        db.session.commit()
    return key


def needs_status(user: User, needs: Sequence[ExternalAuth]) -> list[JsonObject]:
    """API.md: the providers a template version needs, and whether this person has linked each."""
    rows: list[JsonObject] = []
    for need in needs:
        target = configured(need.id)
        link = fresh_link(user, target) if target is not None else None
        rows.append(
            {
                "id": need.id,
                "type": target.type if target is not None else "",
                "display_name": target.display_name if target is not None else need.id,
                "display_icon": target.display_icon if target is not None else "",
                "optional": need.optional,
                "configured": target is not None,
                "authenticated": link is not None and not link.validate_error,
                "link_url": link_url(need.id) if target is not None else "",
            }
        )
    return rows
