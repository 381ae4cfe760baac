"""A real OpenID provider for tests (npm oidc-provider, tests/oidc/idp.mjs) and a way to sign in through it with
plain HTTP: follow the redirects, fill its login form, land back on the relying party's callback."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import urljoin

import httpx

from tests.support.net import free_port, wait_for_http

OIDC_DIR = Path(__file__).resolve().parent.parent / "oidc"
NODE = OIDC_DIR / "node_modules" / ".bin" / "node"
FORM = re.compile(r'<form[^>]*action="([^"]+)"[^>]*method="post"', re.IGNORECASE)
HIDDEN = re.compile(r'<input type="hidden" name="([^"]+)" value="([^"]*)"', re.IGNORECASE)
CLIENT_ID, CLIENT_SECRET = "slipway", "slipway-test-secret"


def git_provider_client(rp_url: str, provider_id: str, client_id: str, client_secret: str) -> dict[str, Any]:
    """A client for Slipway's Git provider (external auth) ``provider_id``: code flow with refresh tokens, the
    secret in the token request's body (as Slipway sends it)."""
    return {
        "client_id": client_id,
        "client_secret": client_secret,
        "redirect_uris": [f"{rp_url}/external-auth/{provider_id}/callback"],
        "grant_types": ["authorization_code", "refresh_token"],
        "token_endpoint_auth_method": "client_secret_post",
    }


class OidcProvider:
    """oidc-provider on 127.0.0.1, with one client for a Slipway at ``rp_url`` and the given accounts."""

    def __init__(
        self,
        rp_url: str,
        accounts: dict[str, dict[str, Any]] | None = None,
        *,
        claims_in_id_token: bool = True,
        log_path: Path,
        extra_clients: list[dict[str, Any]] | None = None,
        access_token_ttl: int = 3600,
        accounts_file: Path | None = None,
    ) -> None:
        assert NODE.exists(), "the test OpenID provider is not installed: run `make oidc-deps`"
        self.port = free_port()
        self.issuer = f"http://127.0.0.1:{self.port}"
        self.config = {
            "port": self.port,
            "clients": [
                {
                    "client_id": CLIENT_ID,
                    "client_secret": CLIENT_SECRET,
                    "redirect_uris": [f"{rp_url}/api/v2/users/oidc/callback"],
                    "post_logout_redirect_uris": [f"{rp_url}/login"],
                },
                *(extra_clients or []),
            ],
            "access_token_ttl": access_token_ttl,
            "accounts": accounts or {},
            "claims_in_id_token": claims_in_id_token,
            # Accounts read again at each sign-in (a test rewrites it to change someone's claims).
            **({"accounts_file": str(accounts_file)} if accounts_file is not None else {}),
        }
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> OidcProvider:
        env = {**os.environ, "OIDC_TEST_CONFIG": json.dumps(self.config)}
        argv = [str(NODE), str(OIDC_DIR / "idp.mjs")]
        with self.log_path.open("ab") as output:  # the child keeps its own copy of the descriptor
            self.process = subprocess.Popen(argv, env=env, stdout=output, stderr=subprocess.STDOUT)
        wait_for_http(f"{self.issuer}/.well-known/openid-configuration", timeout=30)
        return self

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def server_env(self, **extra: str) -> dict[str, str]:
        """The `slipway server` environment that points it at this provider."""
        return {
            "SLIPWAY_OIDC_ISSUER_URL": self.issuer,
            "SLIPWAY_OIDC_CLIENT_ID": CLIENT_ID,
            "SLIPWAY_OIDC_CLIENT_SECRET": CLIENT_SECRET,
            **extra,
        }

    def client_env(self, rp_url: str, **extra: str) -> dict[str, str]:
        """The `slipway server` environment for a Slipway at ``rp_url`` that shares this provider: a client of its
        own, registered now (dynamic registration), with its own redirect URIs."""
        reply = httpx.post(
            f"{self.issuer}/reg",
            json={
                "redirect_uris": [f"{rp_url}/api/v2/users/oidc/callback"],
                "post_logout_redirect_uris": [f"{rp_url}/login"],
            },
        )
        assert reply.status_code == 201, reply.text
        client = reply.json()
        return {
            "SLIPWAY_OIDC_ISSUER_URL": self.issuer,
            "SLIPWAY_OIDC_CLIENT_ID": client["client_id"],
            "SLIPWAY_OIDC_CLIENT_SECRET": client["client_secret"],
            **extra,
        }

    def __enter__(self) -> OidcProvider:
        return self.start()

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.stop()


def sign_in_through(client: httpx.Client, start: httpx.Response, login: str, rp_url: str) -> httpx.Response:
    """From Slipway's redirect to the provider, sign in as ``login`` and return Slipway's callback response.

    ``client`` must not follow redirects by itself: each hop is followed here, so the callback's own answer
    (a redirect to the dashboard, or an error page) is what comes back.
    """
    assert start.is_redirect, f"expected a redirect to the provider, got {start.status_code}"
    return client.get(provider_sign_in(client, urljoin(str(start.url), start.headers["location"]), login, rp_url))


def provider_sign_in(client: httpx.Client, authorize_url: str, login: str, rp_url: str) -> str:
    """Follow ``authorize_url`` at the provider, sign in as ``login``, and return the URL it sends the browser back
    to at ``rp_url`` (the callback, not fetched: an in-process app's test client can fetch it)."""
    if authorize_url.startswith(rp_url):
        return authorize_url
    response = client.get(authorize_url)
    for _ in range(20):
        if response.is_redirect:
            target = urljoin(str(response.url), response.headers["location"])
            if target.startswith(rp_url):
                return target
            response = client.get(target)
            continue
        form = FORM.search(response.text)
        assert response.status_code == 200 and form, f"unexpected provider page {response.status_code}"
        fields = dict(HIDDEN.findall(response.text))
        fields.update(login=login, password="any-password")
        response = client.post(urljoin(str(response.url), form.group(1)), data=fields)
    raise AssertionError("the sign-in did not come back to Slipway")
