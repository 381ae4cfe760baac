"""Talking to a Git provider's OAuth2 endpoints: the authorization code flow with PKCE, refresh, validation,
revocation (RFC 7009) and GitHub's device flow (RFC 8628).

Every failure is one of two errors, because the caller treats them differently: :class:`ProviderUnavailable`
(the provider did not answer sensibly: keep what we have, say it is down) and :class:`TokenRefused` (the provider
answered and refused the token or code: the link is invalid, offer to relink).
"""

from __future__ import annotations

import base64
import hashlib
import secrets
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlencode

import httpx

from app.core.columns import utcnow
from app.core.errors import BadGateway, InvalidInput
from app.core.external_auth_config import ExternalAuthProvider

TIMEOUT = httpx.Timeout(10.0)
# The token response fields kept as the token's "extra" (`slipway external-auth access-token --extra`).
_TOKEN_FIELDS = ("access_token", "refresh_token", "expires_in")


class ProviderUnavailable(BadGateway):
    def __init__(self, provider: ExternalAuthProvider, why: str) -> None:
        super().__init__(f"{provider.display_name} did not answer as expected ({why}). Try again in a moment.")
        self.why = why


class TokenRefused(InvalidInput):
    def __init__(self, provider: ExternalAuthProvider, why: str) -> None:
        super().__init__(f"{provider.display_name} refused: {why}")
        self.why = why


@dataclass(frozen=True)
class TokenSet:
    access_token: str
    refresh_token: str | None = None
    expires_at: datetime | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def new_pkce_pair() -> tuple[str, str]:
    """(verifier, S256 challenge), RFC 7636."""
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    return verifier, challenge


def authorization_url(provider: ExternalAuthProvider, *, redirect_uri: str, state: str, challenge: str) -> str:
    query = {"response_type": "code", "client_id": provider.client_id, "redirect_uri": redirect_uri, "state": state}
    if provider.scopes:
        query["scope"] = " ".join(provider.scopes)
    if provider.pkce:
        query.update(code_challenge=challenge, code_challenge_method="S256")
    separator = "&" if "?" in provider.auth_url else "?"
    return provider.auth_url + separator + urlencode(query)


def exchange_code(provider: ExternalAuthProvider, *, code: str, redirect_uri: str, verifier: str) -> TokenSet:
    form = {"grant_type": "authorization_code", "code": code, "redirect_uri": redirect_uri}
    if provider.pkce:
        form["code_verifier"] = verifier
    return _token_request(provider, form)


def refresh(provider: ExternalAuthProvider, refresh_token: str) -> TokenSet:
    tokens = _token_request(provider, {"grant_type": "refresh_token", "refresh_token": refresh_token})
    # Providers that do not rotate refresh tokens leave the field out: the old one stays good.
    return (
        tokens
        if tokens.refresh_token
        else TokenSet(tokens.access_token, refresh_token, tokens.expires_at, tokens.extra)
    )


def validate(provider: ExternalAuthProvider, access_token: str) -> None:
    """Raise :class:`TokenRefused` when the provider says the token is no good; nothing when it is (or when the
    type has no validation URL: the token is then good until a use of it is refused)."""
    if not provider.validate_url:
        return
    response = _call(provider, "GET", provider.validate_url, headers={"Authorization": f"Bearer {access_token}"})
    if response.status_code in (401, 403):
        raise TokenRefused(provider, f"the token is no longer valid (HTTP {response.status_code})")
    if response.status_code >= 300:
        raise ProviderUnavailable(provider, f"validation answered HTTP {response.status_code}")


def revoke(provider: ExternalAuthProvider, token: str) -> None:
    """RFC 7009; a provider without a revocation URL keeps the token until it expires or the person removes the
    app at the provider."""
    if not provider.revoke_url:
        return
    response = _call(provider, "POST", provider.revoke_url, data={"token": token, **_client_auth(provider)})
    if response.status_code >= 300:
        raise ProviderUnavailable(provider, f"revocation answered HTTP {response.status_code}")


@dataclass(frozen=True)
class DeviceCode:
    device_code: str
    user_code: str
    verification_uri: str
    interval: int
    expires_at: datetime


def start_device_flow(provider: ExternalAuthProvider) -> DeviceCode:
    form = {"scope": " ".join(provider.scopes), **_client_auth(provider)}
    body = _json(provider, _call(provider, "POST", provider.device_code_url, data=form))
    try:
        return DeviceCode(
            device_code=str(body["device_code"]),
            user_code=str(body["user_code"]),
            verification_uri=str(body.get("verification_uri") or body["verification_url"]),
            interval=max(1, int(body.get("interval", 5))),
            expires_at=utcnow() + timedelta(seconds=int(body.get("expires_in", 900))),
        )
    except (KeyError, TypeError, ValueError):
        raise ProviderUnavailable(provider, "its device code answer lacks fields") from None


def poll_device_flow(provider: ExternalAuthProvider, device_code: str) -> TokenSet | None:
    """The tokens once the person has approved, None while they have not yet."""
    grant = "urn:ietf:params:oauth:grant-type:device_code"
    try:
        return _token_request(provider, {"grant_type": grant, "device_code": device_code})
    except TokenRefused as exc:
        if exc.why in ("authorization_pending", "slow_down"):
            return None
        raise


def _token_request(provider: ExternalAuthProvider, form: dict[str, str]) -> TokenSet:
    response = _call(provider, "POST", provider.token_url, data={**form, **_client_auth(provider)})
    body = _json(provider, response)
    if "error" in body or response.status_code >= 400:
        error = str(body.get("error") or f"HTTP {response.status_code}")
        if response.status_code >= 500:
            raise ProviderUnavailable(provider, error)
        raise TokenRefused(provider, error)
    access_token = body.get("access_token")
    if not isinstance(access_token, str) or not access_token:
        raise ProviderUnavailable(provider, "its token answer has no access_token")
    expires_in = body.get("expires_in")
    expires_at = None
    if isinstance(expires_in, int | float | str) and str(expires_in).isdecimal() and int(expires_in) > 0:
        expires_at = utcnow() + timedelta(seconds=int(expires_in))
    refresh_token = body.get("refresh_token")
    return TokenSet(
        access_token=access_token,
        refresh_token=refresh_token if isinstance(refresh_token, str) and refresh_token else None,
        expires_at=expires_at,
        extra={key: value for key, value in body.items() if key not in _TOKEN_FIELDS},
    )


def _client_auth(provider: ExternalAuthProvider) -> dict[str, str]:
    auth = {"client_id": provider.client_id}
    if provider.client_secret:
        auth["client_secret"] = provider.client_secret
    return auth


def _call(provider: ExternalAuthProvider, method: str, url: str, **kwargs: Any) -> httpx.Response:
    try:
        return httpx.request(method, url, headers={"Accept": "application/json", **kwargs.pop("headers", {})},
                             timeout=TIMEOUT, **kwargs)  # fmt: skip
    except httpx.HTTPError as exc:
        raise ProviderUnavailable(provider, type(exc).__name__) from None


def _json(provider: ExternalAuthProvider, response: httpx.Response) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        raise ProviderUnavailable(provider, f"HTTP {response.status_code}, not JSON") from None
    if not isinstance(body, dict):
        raise ProviderUnavailable(provider, "its answer is not a JSON object")
    return body
