"""The CLI against a real server, as a user types it."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import PASSWORD, run_cli
from tests.support.server import ServerProcess


@pytest.fixture(scope="module")
def live_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with ServerProcess(tmp_path_factory.mktemp("cli") / "data", "--provisioner-daemons", "0") as server:
        yield server


@pytest.fixture
def cli_env(tmp_path: Path) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("SLIPWAY_")}
    env["XDG_CONFIG_HOME"] = str(tmp_path / "config")
    return env


def _login(server: ServerProcess, env: dict[str, str], email: str, password: str = PASSWORD) -> None:
    result = run_cli("login", server.url, "--email", email, env=env, input_text=f"{password}\n")
    assert result.returncode == 0, result.stderr


def test_cli_end_to_end(live_server: ServerProcess, cli_env: dict[str, str], tmp_path: Path) -> None:
    # The first `slipway login` on an empty server offers to create the owner.
    first = run_cli(
        "login",
        live_server.url,
        env=cli_env,
        input_text=f"alice\nalice@example.com\n{PASSWORD}\n{PASSWORD}\n",
    )
    assert first.returncode == 0, first.stderr
    assert "Signed in to" in first.stdout and "as alice (owner, member)" in first.stdout
    session_file = tmp_path / "config" / "slipway" / "session.json"
    assert stat.S_IMODE(session_file.stat().st_mode) == 0o600
    assert json.loads(session_file.read_text())["url"] == live_server.url

    created = run_cli(
        "users",
        "create",
        "--username",
        "carol",
        "--email",
        "carol@example.com",
        "--password",
        PASSWORD,
        env=cli_env,
    )
    assert created.returncode == 0, created.stderr
    listed = run_cli("users", "list", env=cli_env)
    assert "alice" in listed.stdout and "carol" in listed.stdout and listed.stdout.startswith("USERNAME")
    as_json = json.loads(run_cli("users", "list", "-o", "json", env=cli_env).stdout)
    assert {user["username"] for user in as_json} == {"alice", "carol"}
    duplicate = run_cli(
        "users",
        "create",
        "--username",
        "carol",
        "--email",
        "c2@example.com",
        "--password",
        PASSWORD,
        env=cli_env,
    )
    assert duplicate.returncode != 0 and "username: This username is taken." in duplicate.stderr

    token = run_cli("tokens", "create", "--name", "ci", "--lifetime", "1d", env=cli_env)
    assert token.returncode == 0, token.stderr
    secret = token.stdout.strip()
    assert "ci" in run_cli("tokens", "list", env=cli_env).stdout
    assert secret.split("-", 1)[1] not in run_cli("tokens", "list", env=cli_env).stdout

    # SLIPWAY_URL and SLIPWAY_SESSION_TOKEN take over without any saved login.
    bare_env = {
        **cli_env,
        "XDG_CONFIG_HOME": str(tmp_path / "elsewhere"),
        "SLIPWAY_URL": live_server.url,
        "SLIPWAY_SESSION_TOKEN": secret,
    }
    assert "alice" in run_cli("whoami", env=bare_env).stdout
    assert run_cli("tokens", "remove", "ci", env=cli_env).returncode == 0
    refused = run_cli("whoami", env=bare_env)
    assert refused.returncode != 0 and "slipway login" in refused.stderr and "Traceback" not in refused.stderr


def test_member_cli_cannot_manage_users(live_server: ServerProcess, cli_env: dict[str, str]) -> None:
    _login(live_server, cli_env, "carol@example.com")
    result = run_cli("users", "list", env=cli_env)
    assert result.returncode != 0
    assert "permission" in result.stderr and "Traceback" not in result.stderr


def test_login_with_token_and_wrong_password(live_server: ServerProcess, cli_env: dict[str, str]) -> None:
    wrong = run_cli("login", live_server.url, "--email", "alice@example.com", env=cli_env, input_text="nope\n")
    assert wrong.returncode != 0 and "Incorrect email or password." in wrong.stderr
    bogus = run_cli("login", live_server.url, "--token", "abc-def", env=cli_env)
    assert bogus.returncode != 0 and "invalid" in bogus.stderr


def test_not_signed_in_and_unreachable_server(cli_env: dict[str, str]) -> None:
    result = run_cli("whoami", env=cli_env)
    assert result.returncode != 0 and "You are not signed in" in result.stderr
    unreachable = run_cli("login", "http://127.0.0.1:9", "--token", "x-y", env=cli_env)
    assert unreachable.returncode != 0 and "cannot reach" in unreachable.stderr


def test_organizations_from_the_cli(live_server: ServerProcess, cli_env: dict[str, str], tmp_path: Path) -> None:
    """alice (made by the first test) creates acme, gives carol a role there and makes acme the organisation that
    --org means: `groups` then works in acme until SLIPWAY_ORGANIZATION or `set default` says otherwise."""
    _login(live_server, cli_env, "alice@example.com")

    def cli(*args: str, env: dict[str, str] = cli_env) -> str:
        result = run_cli(*args, env=env)
        assert result.returncode == 0, (args, result.stderr)
        return result.stdout

    created = cli("organizations", "create", "acme", "--display-name", "Acme", "--description", "Rockets")
    assert "Created organisation acme." in created
    table = cli("organizations", "list").splitlines()
    assert table[0].split() == ["NAME", "DISPLAY_NAME", "DEFAULT", "CURRENT"]
    assert table[1].split() == ["default", "Default", "yes", "*"] and table[2].split() == ["acme", "Acme"]
    cli("organizations", "members", "add", "carol", "--org", "acme")
    given = cli("organizations", "members", "edit-roles", "carol", "organization-user-admin", "--org", "acme")
    assert "carol now has organization-user-admin in acme." in given
    unknown = run_cli("organizations", "members", "edit-roles", "carol", "owner", "--org", "acme", env=cli_env)
    assert unknown.returncode == 1 and "Traceback" not in unknown.stderr
    assert "'owner'" in unknown.stderr and "organization-auditor" in unknown.stderr

    assert "The current organisation is acme" in cli("organizations", "set", "acme")
    assert (tmp_path / "config" / "slipway" / "organization").read_text().strip() == "acme"
    shown = cli("organizations", "show")
    assert shown.startswith("Acme  (acme)") and "description: Rockets" in shown
    members = cli("organizations", "members", "list").splitlines()
    assert [line.split() for line in members[1:]] == [
        ["alice", "alice@example.com", "organization-admin"],
        ["carol", "carol@example.com", "organization-user-admin"],
    ]
    cli("groups", "create", "ml")  # in acme, the current organisation
    in_acme = json.loads(cli("groups", "list", "-o", "json"))
    assert [group["name"] for group in in_acme] == ["Everyone", "ml"]
    assert {group["organization_id"] for group in in_acme} != {"00000000-0000-4000-8000-000000000001"}
    in_default = json.loads(cli("groups", "list", "-o", "json", env={**cli_env, "SLIPWAY_ORGANIZATION": "default"}))
    assert [group["name"] for group in in_default] == ["Everyone"]

    # Template names resolve within the organisation, and the error says which one.
    no_template = run_cli("create", "w1", "-t", "python", env=cli_env)
    assert no_template.returncode == 1 and "No template named 'python' in organisation acme." in no_template.stderr
    missing = run_cli("organizations", "set", "nosuch", env=cli_env)
    assert missing.returncode == 1 and "No organisation 'nosuch'" in missing.stderr
    cli("organizations", "members", "remove", "carol")
    refused = run_cli("organizations", "delete", "default", "--yes", env=cli_env)
    assert refused.returncode == 1 and "default organisation cannot be deleted" in refused.stderr
    cli("organizations", "edit", "acme", "--name", "acme-corp")
    assert "Deleted organisation acme-corp." in cli("organizations", "delete", "acme-corp", "--yes")
    cli("organizations", "set", "default")
    assert cli("organizations", "list", "-c", "name,current").splitlines()[1].split() == ["default", "*"]
