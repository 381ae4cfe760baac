"""Single sign-on end to end over plain HTTP: a real `slipway server` and a real OpenID provider (oidc-provider).

Each failure must give a page that says what happened, a line in the server's log, and no account.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from tests.conftest import PASSWORD, run_cli
from tests.support.oidc import OidcProvider, sign_in_through
from tests.support.server import ServerProcess

ACCOUNTS = {
    "bob": {"email": "Bob@Example.com", "email_verified": True, "preferred_username": "bobby"},
    # alice's address at the provider, once without saying it is verified (anyone could have typed it).
    "mallory": {"email": "alice@example.com", "preferred_username": "mallory", "groups": ["admins"]},
    "alice-sso": {"email": "alice@example.com", "email_verified": True, "preferred_username": "alice", "groups": []},
    "erin": {"email": "erin@example.com", "email_verified": True, "preferred_username": "Erin Smith",
             "groups": ["platform"]},
    "unverified": {"email": "u@example.com", "email_verified": False, "preferred_username": "u"},
    "outsider": {"email": "o@elsewhere.example", "email_verified": True, "preferred_username": "o"},
}  # fmt: skip


@dataclass
class Deployment:
    server: ServerProcess
    provider: OidcProvider
    owner_token: str

    def users(self) -> dict[str, dict[str, object]]:
        reply = httpx.get(
            f"{self.server.url}/api/v2/users", headers={"Authorization": f"Bearer {self.owner_token}"}
        ).json()
        return {user["username"]: user for user in reply}


def _deploy(
    tmp: Path, *, claims_in_id_token: bool = True, provider: OidcProvider | None = None, **server_env: str
) -> Iterator[Deployment]:
    """A server signing in at ``provider`` (through a client of its own), else at a provider of its own."""
    server = ServerProcess(tmp / "data", "--provisioner-daemons", "0")
    with contextlib.ExitStack() as own:
        if provider is None:
            log_path = tmp / "idp.log"
            idp = own.enter_context(
                OidcProvider(server.url, ACCOUNTS, claims_in_id_token=claims_in_id_token, log_path=log_path)
            )
            server.env.update(idp.server_env(**server_env))
        else:
            idp = provider
            server.env.update(idp.client_env(server.url, **server_env))
        with server:
            owner_token = ""
            if server_env.get("SLIPWAY_DISABLE_PASSWORD_AUTH") != "true":
                httpx.post(
                    f"{server.url}/api/v2/users/first",
                    json={"username": "alice", "email": "alice@example.com", "password": PASSWORD},
                )
                login = {"email": "alice@example.com", "password": PASSWORD}
                owner_token = httpx.post(f"{server.url}/api/v2/users/login", json=login).json()["session_token"]
            yield Deployment(server, idp, owner_token)


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    yield from _deploy(
        tmp_path_factory.mktemp("oidc"),
        SLIPWAY_OIDC_ROLE_FIELD="groups",
        SLIPWAY_OIDC_ROLE_MAPPING="platform=template-admin,admins=owner",
        SLIPWAY_OIDC_EMAIL_DOMAIN="example.com",
    )


@pytest.fixture(scope="module")
def provider(deployment: Deployment) -> OidcProvider:
    """The module's provider, for the tests that need a server of their own but not a provider of their own."""
    return deployment.provider


@pytest.fixture
def browser() -> Iterator[httpx.Client]:
    with httpx.Client(follow_redirects=False, timeout=30) as client:
        yield client


def _sign_in(client: httpx.Client, server: ServerProcess, login: str, next_path: str = "") -> httpx.Response:
    start = client.get(f"{server.url}/login/oidc" + (f"?next={next_path}" if next_path else ""))
    assert start.status_code == 302, start.text
    location = start.headers["location"]
    query = parse_qs(urlsplit(location).query)
    assert query["code_challenge_method"] == ["S256"] and query["nonce"] and query["state"]
    return sign_in_through(client, start, login, server.url)


def test_a_new_person_signs_in_and_gets_a_member_account_with_mapped_roles(
    deployment: Deployment, browser: httpx.Client
) -> None:
    landed = _sign_in(browser, deployment.server, "erin", "/templates")
    assert landed.status_code == 302 and landed.headers["location"] == "/templates"
    page = browser.get(f"{deployment.server.url}/workspaces")
    assert page.status_code == 200 and "Erin-Smith" in page.text
    erin = deployment.users()["Erin-Smith"]
    assert erin["login_type"] == "oidc" and erin["roles"] == ["template-admin", "member"]


def _link_with_password(client: httpx.Client, url: str, link_needed: httpx.Response, email: str) -> None:
    """From the "sign in with your password to link" page: sign in with the password, then confirm the link."""
    assert link_needed.status_code == 409 and "An account with this email address already exists" in link_needed.text
    login_path = link_needed.text.split('id="password-sign-in" href="')[1].split('"')[0].replace("&amp;", "&")
    signed = client.post(
        f"{url}{login_path}",
        data={"email": email, "password": PASSWORD, "csrf_token": _csrf(client, f"{url}{login_path}")},
    )
    assert signed.status_code == 302 and signed.headers["location"] == "/account/oidc/link"
    question = client.get(f"{url}/account/oidc/link")
    assert f"identity <strong>{email}</strong>" in question.text
    token = question.text.split('name="csrf_token" value="')[1].split('"')[0]
    linked = client.post(f"{url}/account/oidc/link", data={"decision": "link", "csrf_token": token})
    assert linked.status_code == 302 and linked.headers["location"] == "/account"


def _csrf(client: httpx.Client, page_url: str) -> str:
    return client.get(page_url).text.split('name="csrf_token" value="')[1].split('"')[0]


def test_a_verified_email_links_an_existing_account_only_after_its_password(
    deployment: Deployment, browser: httpx.Client
) -> None:
    owner = {"Authorization": f"Bearer {deployment.owner_token}"}
    account = {"username": "bob", "email": "bob@example.com", "password": PASSWORD, "roles": ["template-admin"]}
    bob = httpx.post(f"{deployment.server.url}/api/v2/users", json=account, headers=owner).json()
    link_needed = _sign_in(browser, deployment.server, "bob")
    assert browser.get(f"{deployment.server.url}/workspaces").is_redirect  # not signed in by the email alone
    assert deployment.users()["bob"]["roles"] == ["template-admin", "member"]
    _link_with_password(browser, deployment.server.url, link_needed, "bob@example.com")

    with httpx.Client(follow_redirects=False, timeout=30) as later:
        assert _sign_in(later, deployment.server, "bob").headers["location"] == "/workspaces"
        assert "bob" in later.get(f"{deployment.server.url}/account").text
    after = deployment.users()
    assert after["bob"]["id"] == bob["id"] and "bobby" not in after
    assert after["bob"]["roles"] == ["member"]  # template-admin is mapped, and bob is in no mapped group


def test_the_owners_email_at_the_provider_does_not_get_in(deployment: Deployment, browser: httpx.Client) -> None:
    """Without email_verified the owner's address links nothing; with it, the owner's password is needed, and
    once linked, an empty group claim leaves the last owner an owner (the operator reads why in the log)."""
    url = deployment.server.url
    with httpx.Client(follow_redirects=False, timeout=30) as mallorys:
        refused = _sign_in(mallorys, deployment.server, "mallory")
        assert refused.status_code == 403 and "does not confirm that your email address is verified" in refused.text
        assert mallorys.get(f"{url}/workspaces").is_redirect
    link_needed = _sign_in(browser, deployment.server, "alice-sso")
    assert browser.get(f"{url}/workspaces").is_redirect
    _link_with_password(browser, url, link_needed, "alice@example.com")

    with httpx.Client(follow_redirects=False, timeout=30) as later:
        assert _sign_in(later, deployment.server, "alice-sso").headers["location"] == "/workspaces"
        assert "alice" in later.get(f"{url}/account").text
    assert deployment.users()["alice"]["roles"] == ["owner", "member"]
    assert "kept the owner role of alice" in deployment.server.log()
    assert "mallory" not in deployment.users()


@pytest.mark.parametrize(
    ("login", "words"),
    [("unverified", "not verified"), ("outsider", "elsewhere.example may not sign in")],
)
def test_refused_people_get_a_page_and_no_account(
    deployment: Deployment, browser: httpx.Client, login: str, words: str
) -> None:
    page = _sign_in(browser, deployment.server, login)
    assert page.status_code == 403 and words in page.text
    assert "slipway_session" not in browser.cookies or browser.get(f"{deployment.server.url}/workspaces").is_redirect
    assert {"u", "o"}.isdisjoint(deployment.users())
    assert words in deployment.server.log()


def test_a_callback_this_browser_did_not_start_is_refused(deployment: Deployment, browser: httpx.Client) -> None:
    start = browser.get(f"{deployment.server.url}/login/oidc")
    with httpx.Client(follow_redirects=False, timeout=30) as other:  # another browser finishes the sign-in
        page = sign_in_through(other, other.get(start.headers["location"]), "erin", deployment.server.url)
    assert page.status_code == 400 and "did not start here" in page.text
    tampered = browser.get(f"{deployment.server.url}/api/v2/users/oidc/callback?code=x&state=forged")
    assert tampered.status_code == 400


def test_sign_out_ends_the_providers_session_too(deployment: Deployment, browser: httpx.Client) -> None:
    _sign_in(browser, deployment.server, "erin")
    page = browser.get(f"{deployment.server.url}/account")
    token = page.text.split('name="csrf_token" value="')[1].split('"')[0]
    out = browser.post(f"{deployment.server.url}/logout", data={"csrf_token": token})
    assert out.status_code == 302
    assert out.headers["location"].startswith(f"{deployment.provider.issuer}/session/end")
    assert "id_token_hint=" in out.headers["location"]
    assert browser.get(f"{deployment.server.url}/workspaces").status_code == 302  # signed out here


def test_claims_only_in_userinfo_are_read_from_there(tmp_path: Path, browser: httpx.Client) -> None:
    for deployment in _deploy(tmp_path, claims_in_id_token=False):
        assert _sign_in(browser, deployment.server, "erin").status_code == 302
        assert deployment.users()["Erin-Smith"]["email"] == "erin@example.com"


def test_a_wrong_client_secret_is_a_clear_page(tmp_path: Path, browser: httpx.Client, provider: OidcProvider) -> None:
    for deployment in _deploy(tmp_path, provider=provider, SLIPWAY_OIDC_CLIENT_SECRET="not-the-secret"):
        page = _sign_in(browser, deployment.server, "erin")
        assert page.status_code == 502 and "refused the sign-in (invalid_client)" in page.text
        assert "invalid_client" in deployment.server.log()
        assert "Erin-Smith" not in deployment.users()


def test_a_provider_that_is_down(tmp_path: Path, browser: httpx.Client) -> None:
    for deployment in _deploy(tmp_path):
        deployment.provider.stop()
        page = browser.get(f"{deployment.server.url}/login/oidc")
        assert page.status_code == 502 and "could not be reached" in page.text
        assert "OIDC discovery" in deployment.server.log()


def test_a_provider_that_is_not_the_configured_issuer(
    tmp_path: Path, browser: httpx.Client, provider: OidcProvider
) -> None:
    """The same provider reached under another name: its discovery document names a different issuer."""
    for deployment in _deploy(tmp_path, provider=provider):
        deployment.server.stop()
        deployment.server.env["SLIPWAY_OIDC_ISSUER_URL"] = f"http://localhost:{deployment.provider.port}"
        deployment.server.start()
        page = browser.get(f"{deployment.server.url}/login/oidc")
        assert page.status_code == 403 and "issuer does not match" in page.text
        assert "issuer mismatch" in deployment.server.log()


def test_an_oidc_only_server_signs_in_the_cli_with_a_pasted_token(
    tmp_path: Path, browser: httpx.Client, provider: OidcProvider
) -> None:
    for deployment in _deploy(tmp_path, provider=provider, SLIPWAY_DISABLE_PASSWORD_AUTH="true"):
        url = deployment.server.url
        login_page = browser.get(f"{url}/login").text
        assert 'id="oidc-sign-in"' in login_page and 'name="password"' not in login_page
        refused = httpx.post(f"{url}/api/v2/users/login", json={"email": "a@example.com", "password": PASSWORD})
        assert refused.status_code == 403 and "Password sign-in is disabled" in refused.json()["message"]
        assert httpx.get(f"{url}/api/v2/users/authmethods").json()["password"] == {"enabled": False}

        assert _sign_in(browser, deployment.server, "erin").status_code == 302  # the first person: the owner
        form = browser.get(f"{url}/cli-auth").text
        csrf = form.split('name="csrf_token" value="')[1].split('"')[0]
        shown = browser.post(f"{url}/cli-auth", data={"csrf_token": csrf}).text
        token = shown.split('id="cli-token">')[1].split("<")[0].strip()

        env = {key: value for key, value in os.environ.items() if not key.startswith("SLIPWAY_")}
        env["XDG_CONFIG_HOME"] = str(tmp_path / "config")
        cli = run_cli("login", url, env=env, input_text=f"{token}\n")
        assert cli.returncode == 0, cli.stdout + cli.stderr
        assert f"{url}/cli-auth" in cli.stdout and "Erin-Smith (owner" in cli.stdout
        assert token not in cli.stdout
        assert run_cli("whoami", env=env).stdout.startswith("Erin-Smith")
