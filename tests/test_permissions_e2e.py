"""Template permissions end to end: a real server with a real daemon and Terraform, the CLI as people type it, and
Chromium. A member outside the group cannot see, create from or start from the template (API, dashboard, CLI);
joining the group makes it appear; leaving it refuses the start with whom to ask."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import PASSWORD, run_cli
from tests.support.browser import browser_page, sign_in_page
from tests.support.server import ServerProcess

MAIN_TF = 'resource "terraform_data" "home" {}\n'


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with ServerProcess(tmp_path_factory.mktemp("permissions") / "data", "--provisioner-daemons", "1") as running:
        yield running


def cli_env(server: ServerProcess, home: Path, email: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("SLIPWAY_")}
    env["XDG_CONFIG_HOME"] = str(home)
    login = run_cli("login", server.url, "--email", email, env=env, input_text=f"{PASSWORD}\n")
    assert login.returncode == 0, login.stderr
    return env


def cli(env: dict[str, str], *args: str, ok: bool = True) -> str:
    result = run_cli(*args, env=env, timeout=180)
    assert (result.returncode == 0) == ok, f"slipway {' '.join(args)}: {result.stdout}{result.stderr}"
    return result.stdout + result.stderr


def test_a_member_sees_and_uses_the_template_only_through_the_group(server: ServerProcess, tmp_path: Path) -> None:
    first = {"username": "alice", "email": "alice@example.com", "password": PASSWORD}
    assert httpx.post(f"{server.url}/api/v2/users/first", json=first).status_code == 201
    alice = cli_env(server, tmp_path / "alice", "alice@example.com")
    cli(alice, "users", "create", "--username", "carol", "--email", "carol@example.com", "--password", PASSWORD)
    carol = cli_env(server, tmp_path / "carol", "carol@example.com")
    token = httpx.post(f"{server.url}/api/v2/users/login", json={"email": "carol@example.com", "password": PASSWORD})
    api = httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {token.json()['session_token']}"})

    # Alice pushes gpu and keeps it for the group ml.
    (tmp_path / "gpu").mkdir()
    (tmp_path / "gpu" / "main.tf").write_text(MAIN_TF)
    assert "Created template gpu" in cli(alice, "templates", "push", "gpu", "-d", str(tmp_path / "gpu"))
    cli(alice, "groups", "create", "ml", "--display-name", "Machine learning")
    cli(alice, "templates", "permissions", "set", "gpu", "--group", "ml=use")
    cli(alice, "templates", "permissions", "remove", "gpu", "--group", "Everyone")
    listed = cli(alice, "templates", "permissions", "list", "gpu")
    assert "ml" in listed and "Everyone" not in listed

    # Carol, outside the group: nothing to see or use, anywhere.
    assert "gpu" not in cli(carol, "templates", "list")
    refused = cli(carol, "create", "ws", "-t", "gpu", ok=False)
    assert "gpu" in refused and ("No template" in refused or "not found" in refused.lower()), refused
    assert api.get("/api/v2/templates").json() == []
    with browser_page() as page:
        sign_in_page(page, server.url, "carol@example.com")
        page.goto(f"{server.url}/templates")
        assert page.locator("a[href='/templates/gpu']").count() == 0
        assert page.goto(f"{server.url}/templates/gpu").status == 404  # type: ignore[union-attr]
        assert page.goto(f"{server.url}/workspaces/new?template=gpu").status == 404  # type: ignore[union-attr]

        # Joining the group makes it appear: CLI, API and dashboard.
        cli(alice, "groups", "add", "ml", "carol")
        assert "carol" in cli(alice, "groups", "members", "ml")
        assert "gpu" in cli(carol, "templates", "list")
        templates = api.get("/api/v2/templates").json()
        assert [item["name"] for item in templates] == ["gpu"]
        template_id = templates[0]["id"]
        page.goto(f"{server.url}/templates")
        assert page.locator("a[href='/templates/gpu']").count() >= 1
        page.goto(f"{server.url}/templates/gpu")
        assert "ml" in page.locator("#template-access").inner_text()
        assert page.locator("#tab-permissions").count() == 0, "carol may use it, not manage it"
        created = cli(carol, "create", "ws", "-t", "gpu")
        assert "succeeded" in created, created
        cli(carol, "stop", "ws")

        # Leaving the group: the template is gone for her, and starting her workspace is refused, saying why.
        cli(alice, "groups", "remove", "ml", "carol")
        assert "gpu" not in cli(carol, "templates", "list")
        assert api.get(f"/api/v2/templates/{template_id}").status_code == 404
        start = cli(carol, "start", "ws", ok=False)
        assert "no longer have permission to use template gpu" in start, start
        workspace = api.get("/api/v2/workspaces").json()[0]
        refused_api = api.post(f"/api/v2/workspaces/{workspace['id']}/builds", json={"transition": "start"})
        assert refused_api.status_code == 403 and "owner or a template admin" in refused_api.json()["message"]
        page.goto(f"{server.url}/workspaces/{workspace['id']}")
        page.click("button[name=transition][value=start]")
        page.wait_for_selector(".flash-error")
        assert "no longer have permission to use template gpu" in page.locator(".flash-error").inner_text()
    api.close()
    # The rest of `slipway groups`: rename, list, delete (what it granted goes with it).
    cli(alice, "groups", "edit", "ml", "--name", "ml-team", "--avatar-url", "/icon/ml.svg")
    listed_groups = cli(alice, "groups", "list", "-c", "name,members")
    assert "ml-team" in listed_groups and "Everyone" in listed_groups
    assert "ml-team" in cli(alice, "templates", "permissions", "list", "gpu")
    cli(alice, "groups", "delete", "ml-team", "--yes")
    assert "ml-team" not in cli(alice, "templates", "permissions", "list", "gpu")
    assert "Only owners and user admins" in cli(carol, "groups", "create", "mine", ok=False)
