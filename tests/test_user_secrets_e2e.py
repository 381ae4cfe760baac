"""People's secrets end to end, on one real server whose daemon builds with real Terraform and our coder provider:
a template's `data "coder_secret"` fails the owner's start until they store the secret, then the value reaches
Terraform (and into the build log only masked)."""

from __future__ import annotations

import json

import pytest
from playwright.sync_api import expect

from tests.support.accessibility import severe_violations
from tests.support.browser import browser_page, sign_in_page, watch_for_problems
from tests.support.deployment import shared_deployment

VALUE = "slipway-e2e-token-42"
TEMPLATE = """
terraform {
  required_providers {
    coder = { source = "coder/coder" }
  }
}

data "coder_secret" "gh" {
  env          = "GITHUB_TOKEN"
  help_message = "Add a secret named for GITHUB_TOKEN on your Account page."
}

locals {
  token = nonsensitive(data.coder_secret.gh.value)
}

resource "terraform_data" "uses_token" {
  input = data.coder_secret.gh.value
  provisioner "local-exec" {
    # The value itself (the log must mask it) and spelled out with dots (proof that it arrived, unmasked).
    command = "echo token=${local.token} spelled=${join(".", regexall(".", local.token))}"
  }
}
"""


def test_a_start_needs_the_owners_secret_and_gets_it_masked_in_the_log(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    # The shared deployment (tests/conftest.py): the template, carol's workspace and the secrets are this test's own.
    deployment = shared_deployment(tmp_path_factory)
    deployment.push_template("secrets", TEMPLATE)
    # Another person's secret of the same variable is no use to carol.
    with deployment.api("dave") as api:
        body = {"name": "gh", "value": "dave-token", "env_name": "GITHUB_TOKEN"}
        assert api.post("/users/me/secrets", json=body).status_code == 201

    refused = deployment.cli("carol", "create", "w", "-t", "secrets", timeout=300)
    assert refused.returncode != 0, refused.stdout + refused.stderr
    first_log = deployment.cli("carol", "logs", "w")
    assert 'Missing required secret: environment variable "GITHUB_TOKEN"' in first_log.stdout + first_log.stderr
    assert "Add a secret named for GITHUB_TOKEN on your Account page." in first_log.stdout + first_log.stderr

    stored = deployment.cli(
        "carol", "secrets", "create", "gh", "--value-file", "-", "--env", "GITHUB_TOKEN", input_text=VALUE + "\n"
    )
    assert stored.returncode == 0, stored.stdout + stored.stderr
    listed = deployment.cli("carol", "secrets", "list", "-o", "json")
    assert [(row["name"], row["env_name"]) for row in json.loads(listed.stdout)] == [("gh", "GITHUB_TOKEN")]
    assert VALUE not in listed.stdout
    table = deployment.cli("carol", "secrets", "list", "-c", "name,env_name").stdout.splitlines()
    assert table[0].split() == ["NAME", "ENV_NAME"] and table[1].split() == ["gh", "GITHUB_TOKEN"]
    clash = deployment.cli("carol", "secrets", "create", "again", "--value", "x", "--env", "GITHUB_TOKEN")
    assert clash.returncode != 0 and "already provides the variable GITHUB_TOKEN" in clash.stderr
    started = deployment.cli("carol", "start", "w", timeout=300)
    assert started.returncode == 0, started.stdout + started.stderr
    log = deployment.cli("carol", "logs", "w")
    assert log.returncode == 0, log.stdout + log.stderr
    assert ".".join(VALUE) in log.stdout, log.stdout
    assert "token=" in log.stdout and VALUE not in log.stdout + started.stdout
    assert "dave-token" not in log.stdout
    deleted = deployment.cli("dave", "secrets", "delete", "gh")
    assert deleted.returncode == 0 and "Deleted secret gh." in deleted.stdout
    assert deployment.cli("dave", "secrets", "list", "-o", "json").stdout.strip() == "[]"
    _account_page_on_a_phone(deployment.url)


def _account_page_on_a_phone(url: str) -> None:
    """carol's secret in a real browser under the strict CSP at 390 px, dark: listed, a bad form marked, deleted."""
    with browser_page() as page:
        problems = watch_for_problems(page.context)
        page.emulate_media(color_scheme="dark")
        page.set_viewport_size({"width": 390, "height": 844})
        sign_in_page(page, url, "carol@example.com")
        page.goto(f"{url}/account#secrets")
        row = page.locator('tr[data-secret="gh"]')
        expect(row).to_contain_text("$GITHUB_TOKEN")
        page.fill("#secret-name", "bad name")
        page.fill("#secret-value", "typed")
        page.fill("#secret-env_name", "9X")
        page.get_by_role("button", name="Add secret").click()
        expect(page.locator("#secret-name-error")).to_be_visible()
        expect(page.locator("#secret-env_name-error")).to_be_visible()
        expect(page.locator("#secret-name")).to_have_value("bad name")
        expect(page.locator("#secret-value")).to_have_value("")
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
        assert severe_violations(page) == []
        page.once("dialog", lambda dialog: dialog.accept())
        row.get_by_role("button", name="Delete").click()
        expect(page.locator(".flash-success")).to_contain_text("Secret gh deleted.")
        expect(page.locator('tr[data-secret="gh"]')).to_have_count(0)
        refused = "/account/secrets: Failed to load resource: the server responded with a status of 400"
        unexpected = [problem for problem in problems if refused not in problem]  # the bad form, on purpose
        assert len(unexpected) == len(problems) - 1 and unexpected == [], "\n".join(problems)
