"""Git provider links under way, kept on the server: an authorization code flow's state and PKCE verifier, or a
device flow's device code.

They used to live in the browser's signed session cookie, which belongs to the browser, not to the person: a flow
started by one member who then signed out completed into the account of whoever signed in next in that browser,
and a copy of the cookie taken before the callback replayed a used state with a fresh code. Here a flow is a field
of a Redis hash per *browser session* (the server-side session row of app/users/browser_sessions.py), bound to
the person who started it, taken at most once (HDEL decides who), and gone after ``FLOW_SECONDS``. Signing out
drops the hash; signing in starts a new browser session, which sees none of the old one's flows.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import time
from dataclasses import asdict, dataclass
from typing import Any

import redis
from flask import Flask, g, session
from flask_login import user_logged_in, user_logged_out

from app.core.errors import ServiceUnavailable
from app.core.redis_client import get_redis

KEY = "slipway:external-auth:flows:{}"
FLOW_SECONDS = 15 * 60
# A person may have a few links under way at once (several tabs); the oldest beyond these is dropped.
MAX_FLOWS = 5
# What the session cookie held before flows moved here: dropped at sign-in and sign-out.
LEGACY_SESSION_KEYS = ("external_auth_flows", "external_auth_device")
_DEVICE_PREFIX = "device:"
_UNAVAILABLE = "Linking a Git provider needs the server's Redis, which is not answering; try again in a minute."


@dataclass(frozen=True)
class Flow:
    user_id: str
    provider_id: str
    secret: str  # the PKCE verifier, or the device code
    back: str
    expires: float


def init_app(app: Flask) -> None:
    user_logged_in.connect(_on_sign_in, sender=app)
    user_logged_out.connect(_on_sign_out, sender=app)


def begin(browser_session_id: str, flow: Flow) -> str:
    """Keep ``flow`` for this browser session; the state to send to the provider (only its hash is stored)."""
    state = secrets.token_urlsafe(32)
    _put(browser_session_id, _field(state), flow)
    return state


def take(browser_session_id: str, user_id: str, provider_id: str, state: str) -> Flow | None:
    """The flow ``state`` names, removed: None unless it exists, this person started it for this provider in this
    browser session, it has not expired, and no other request took it first."""
    key, field = KEY.format(browser_session_id), _field(state)
    try:
        with get_redis().pipeline(transaction=True) as pipe:
            pipe.hget(key, field)
            pipe.hdel(key, field)
            raw, removed = pipe.execute()
    except redis.RedisError as exc:
        raise ServiceUnavailable(_UNAVAILABLE) from exc
    if not removed or raw is None:
        return None
    return _valid(raw, user_id, provider_id)


def begin_device(browser_session_id: str, flow: Flow) -> None:
    """Keep a device flow's code: one per provider and browser session (a new one replaces the last)."""
    _put(browser_session_id, _DEVICE_PREFIX + flow.provider_id, flow)


def device_flow(browser_session_id: str, user_id: str, provider_id: str) -> Flow | None:
    """The device flow under way for this provider, if this person started it here and it has not expired."""
    try:
        raw: bytes | str | None = get_redis().hget(KEY.format(browser_session_id), _DEVICE_PREFIX + provider_id)
    except redis.RedisError as exc:
        raise ServiceUnavailable(_UNAVAILABLE) from exc
    return None if raw is None else _valid(raw, user_id, provider_id)


def end_device(browser_session_id: str, provider_id: str) -> bool:
    """Remove the device flow; True for the one request that removed it (two polls may both see it approved)."""
    try:
        return bool(get_redis().hdel(KEY.format(browser_session_id), _DEVICE_PREFIX + provider_id))
    except redis.RedisError as exc:
        raise ServiceUnavailable(_UNAVAILABLE) from exc


def forget(browser_session_id: str) -> None:
    try:
        get_redis().delete(KEY.format(browser_session_id))
    except redis.RedisError:  # the hash expires on its own, and no later browser session can reach it
        return


def _put(browser_session_id: str, field: str, flow: Flow) -> None:
    key, now = KEY.format(browser_session_id), time.time()
    try:
        client = get_redis()
        held = {_text(name): _expiry(raw) for name, raw in client.hgetall(key).items()}
        stale = [name for name, expires in held.items() if expires <= now]
        live = sorted((expires, name) for name, expires in held.items() if expires > now and name != field)
        stale += [name for _, name in live[: max(0, len(live) - (MAX_FLOWS - 1))]]
        with client.pipeline(transaction=True) as pipe:
            if stale:
                pipe.hdel(key, *stale)
            pipe.hset(key, field, json.dumps(asdict(flow)))
            pipe.expire(key, max(FLOW_SECONDS, int(flow.expires - now) + 1))
            pipe.execute()
    except redis.RedisError as exc:
        raise ServiceUnavailable(_UNAVAILABLE) from exc


def _field(state: str) -> str:
    return hashlib.sha256(state.encode()).hexdigest()


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _expiry(raw: bytes | str) -> float:
    try:
        return float(json.loads(raw)["expires"])
    except (ValueError, KeyError, TypeError):
        return 0.0


def _valid(raw: bytes | str, user_id: str, provider_id: str) -> Flow | None:
    try:
        flow = Flow(**json.loads(raw))
    except (ValueError, TypeError):
        return None
    if flow.user_id != user_id or flow.provider_id != provider_id or flow.expires <= time.time():
        return None
    return flow


def _on_sign_in(sender: Flask, **extra: Any) -> None:
    for name in LEGACY_SESSION_KEYS:
        session.pop(name, None)


def _on_sign_out(sender: Flask, **extra: Any) -> None:
    browser_session_id: str | None = g.get("browser_session_id")
    if browser_session_id:
        forget(browser_session_id)
    for name in LEGACY_SESSION_KEYS:
        session.pop(name, None)
