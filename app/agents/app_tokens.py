"""Signing in to an app's own origin: a one-time code handed over by redirect, traded for a cookie of that host.

The dashboard's session cookie is host-only on the access URL's host, so the browser never sends it to an app
host. An app host without a cookie of its own sends the browser to the dashboard (``/api/v2/applications/
auth-redirect``), which mints a code for that one host and redirects back with it in the query; the app host
trades it, once, within :data:`CODE_LIFETIME`, for :data:`APP_SESSION_COOKIE`, which is scoped to that host
alone and names the dashboard session it came from: signing out there ends it here too.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from dataclasses import dataclass
from datetime import timedelta

import redis

from app.core.columns import utcnow
from app.core.extensions import db
from app.core.signing import Signer
from app.users.models import STATUS_ACTIVE, BrowserSession, User

# Long enough for a redirect over a slow link, too short to be worth stealing from a log.
CODE_LIFETIME = timedelta(seconds=60)
CODE_PARAMETER = "slipway_app_code"
APP_SESSION_COOKIE = "slipway_app_session"
_CODE_KEY = "slipway:app-code:{}"
_PURPOSE = "app-session"


@dataclass(frozen=True)
class CodeGrant:
    browser_session_id: str
    host_label: str


def issue_code(client: redis.Redis, signer: Signer, browser_session_id: str, host_label: str) -> str:
    """A code that signs in to the app host ``host_label`` only, for the dashboard session that asked."""
    code = secrets.token_urlsafe(32)
    value = json.dumps(
        {
            "session": browser_session_id,
            "host": host_label,
            "sig": signer.sign(_PURPOSE, browser_session_id, host_label),
        }
    )
    client.set(_code_key(code), value, ex=CODE_LIFETIME)
    return code


def redeem_code(client: redis.Redis, signer: Signer, code: str, host_label: str) -> CodeGrant | None:
    """The grant behind ``code`` if it was made for this host, still live and never used; it is used up either way."""
    pipe = client.pipeline(transaction=True)  # read and delete at once: two tabs cannot both trade one code
    pipe.get(_code_key(code))
    pipe.delete(_code_key(code))
    raw, _ = pipe.execute()
    if not raw:
        return None
    try:
        stored = json.loads(raw)
        grant = CodeGrant(str(stored["session"]), str(stored["host"]))
        signature = str(stored["sig"])
    except (ValueError, KeyError, TypeError):
        return None
    if not signer.verify(signature, _PURPOSE, grant.browser_session_id, grant.host_label):
        return None  # not written by this server: Redis is shared with daemons
    return grant if grant.host_label == host_label else None


def _code_key(code: str) -> str:
    # The code itself is a credential: only its hash sits in Redis.
    return _CODE_KEY.format(hashlib.sha256(code.encode()).hexdigest())


def session_cookie_value(signer: Signer, grant: CodeGrant) -> str:
    return f"{grant.browser_session_id}.{signer.sign(_PURPOSE, grant.browser_session_id, grant.host_label)}"


def user_of_cookie(signer: Signer, value: str, host_label: str) -> User | None:
    """Whom the app host's cookie signs in, while the dashboard session it came from lives."""
    session_id, _, signature = value.partition(".")
    if not session_id or not signature or not signer.verify(signature, _PURPOSE, session_id, host_label):
        return None
    found = db.session.get(BrowserSession, session_id)
    if found is None or found.expires_at <= utcnow() or found.user.status != STATUS_ACTIVE:
        return None
    return found.user
