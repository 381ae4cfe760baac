"""Presets end to end, on one real server whose daemons import with real Terraform: `slipway create --preset` (the
default preset used and said when none is named, `none` skips it, an unknown name lists the presets there are), and
the create form in a real browser under the strict CSP (choosing a preset shows its values set and locked). Also
the template page's Update all on five outdated workspaces, built with real Terraform (it shares this server)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from playwright.sync_api import expect

from tests.support.browser import ARTIFACTS, browser_page, sign_in_page, watch_for_problems
from tests.support.deployment import Deployment, shared_deployment
from tests.support.waiting import wait_until

TEMPLATE = """
terraform {
  required_providers {
    coder = { source = "coder/coder" }
  }
}

data "coder_parameter" "region" {
  name    = "region"
  default = "eu"
}

data "coder_parameter" "size" {
  name    = "size"
  type    = "number"
  default = 1
}

data "coder_workspace_preset" "us" {
  name    = "US"
  default = true
  parameters = {
    region = "us"
  }
}

data "coder_workspace_preset" "big" {
  name = "Big"
  parameters = {
    size = 8
  }
}

resource "terraform_data" "home" {
  input = "${data.coder_parameter.region.value}-${data.coder_parameter.size.value}"
}
"""


_BUILD_PAGE = re.compile(r".*/builds/[^/]+$")


def _values(deployment: Deployment, owner: str, name: str) -> dict[str, str]:
    build = deployment.workspace(owner, name)["latest_build"]
    with deployment.api(owner) as api:
        values = api.get(f"/workspacebuilds/{build['id']}/parameters").json()
    return {item["name"]: item["value"] for item in values}


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Deployment:
    deployment = shared_deployment(tmp_path_factory)  # its template and workspaces are named for this module
    deployment.push_template("presets", TEMPLATE)
    return deployment


def test_create_chooses_a_preset_by_name_by_default_or_none(deployment: Deployment) -> None:
    by_default = deployment.cli("carol", "create", "one", "-t", "presets", "-p", "region=eu", "-p", "size=2")
    assert by_default.returncode == 0, by_default.stdout + by_default.stderr
    assert "Preset 'US' applied: region=us" in by_default.stdout
    assert _values(deployment, "carol", "one") == {"region": "us", "size": "2"}

    named = deployment.cli("carol", "create", "two", "-t", "presets", "--preset", "Big")
    assert named.returncode == 0, named.stdout + named.stderr
    assert "Preset 'Big' applied: size=8" in named.stdout
    assert _values(deployment, "carol", "two") == {"region": "eu", "size": "8"}

    skipped = deployment.cli("carol", "create", "three", "-t", "presets", "--preset", "none")
    assert skipped.returncode == 0, skipped.stdout + skipped.stderr
    assert "Preset" not in skipped.stdout
    assert _values(deployment, "carol", "three") == {"region": "eu", "size": "1"}

    unknown = deployment.cli("carol", "create", "four", "-t", "presets", "--preset", "Huge")
    assert unknown.returncode == 1
    assert "Template presets has no preset named 'Huge' (its presets: Big, US)." in unknown.stderr
    with deployment.api("carol") as api:
        assert {w["name"] for w in api.get("/workspaces", params={"owner": "me"}).json()} >= {"one", "two", "three"}
        assert "four" not in {w["name"] for w in api.get("/workspaces", params={"owner": "me"}).json()}


def test_the_create_form_shows_the_chosen_presets_values_locked(deployment: Deployment) -> None:
    with browser_page() as page:
        problems = watch_for_problems(page.context)
        page.set_viewport_size({"width": 390, "height": 844})
        sign_in_page(page, deployment.url, "dave@example.com")
        expect(page).to_have_url(f"{deployment.url}/workspaces")
        page.goto(f"{deployment.url}/workspaces/new?template=presets")
        region, size = page.locator('[name="param.region"]'), page.locator('[name="param.size"]')
        preset = page.locator('select[name="preset"]')

        expect(preset.locator("option:checked")).to_have_text("US (default)")
        expect(region).to_be_disabled()
        expect(region).to_have_value("us")
        expect(page.locator('[data-preset-note="region"]')).to_have_text("Set by preset US.")
        expect(size).to_be_enabled()
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")

        preset.select_option(label="Big")
        expect(size).to_be_disabled()
        expect(size).to_have_value("8")
        expect(page.locator('[data-preset-note="size"]')).to_have_text("Set by preset Big.")
        expect(region).to_be_enabled()
        expect(page.locator('[data-preset-note="region"]')).to_be_hidden()

        page.fill('input[name="name"]', "formed")
        region.fill("north")
        page.get_by_role("button", name="Create workspace").click()
        expect(page).to_have_url(_BUILD_PAGE)
        assert problems == [], "\n".join(problems)
    assert _values(deployment, "dave", "formed") == {"region": "north", "size": "8"}


# Update all, end to end: a template whose builds apply a real terraform_data, five workspaces on its first version.
FLEET = """
terraform {
  required_providers {
    coder = { source = "coder/coder" }
  }
}
data "coder_workspace" "me" {}
resource "terraform_data" "home" {
  count = data.coder_workspace.me.start_count
  input = "%s"
}
"""
FLEET_OWNERS = {"fleet-1": "carol", "fleet-2": "carol", "fleet-3": "carol", "fleet-4": "dave", "fleet-5": "dave"}


def _fleet(deployment: Deployment) -> list[dict[str, Any]]:
    with deployment.api("alice") as api:
        listed = api.get("/workspaces", params={"q": "template:fleet"}).json()
    return [workspace for workspace in listed if workspace["name"] in FLEET_OWNERS]


def _all_built_on(deployment: Deployment, version_id: str) -> bool:
    builds = [workspace["latest_build"] for workspace in _fleet(deployment)]
    return len(builds) == len(FLEET_OWNERS) and all(
        build["template_version_id"] == version_id and build["job"]["status"] == "succeeded" for build in builds
    )


def test_update_all_updates_five_outdated_workspaces(deployment: Deployment) -> None:
    deployment.push_template("fleet", FLEET % "v1")
    with deployment.api("alice") as api:
        template = api.get("/templates", params={"name": "fleet"}).json()[0]
    for name, owner in FLEET_OWNERS.items():
        with deployment.api(owner) as api:
            made = api.post("/workspaces", json={"template_id": template["id"], "name": name})
            assert made.status_code == 201, made.text
    wait_until(lambda: _all_built_on(deployment, template["active_version_id"]), 120, "the five first builds")
    second = deployment.tmp / "template-fleet-v2"
    second.mkdir()
    (second / "main.tf").write_text(FLEET % "v2")
    pushed = deployment.cli("alice", "templates", "push", "fleet", "-d", str(second), "-m", "v2 for everyone")
    assert pushed.returncode == 0, pushed.stdout + pushed.stderr
    with deployment.api("alice") as api:
        active = api.get(f"/templates/{template['id']}").json()["active_version_id"]
        assert api.get(f"/templateversions/{active}").json()["message"] == "v2 for everyone"
    assert active != template["active_version_id"]

    with browser_page() as page:
        problems = watch_for_problems(page.context)
        page.set_viewport_size({"width": 1400, "height": 900})
        sign_in_page(page, deployment.url, "alice@example.com")
        expect(page).to_have_url(f"{deployment.url}/workspaces")
        page.goto(f"{deployment.url}/templates/fleet")
        expect(page.locator("#template-workspace-count")).to_have_text("5 workspaces, 5 outdated")
        expect(page.locator(".version-message")).to_have_text("v2 for everyone")
        page.locator("#update-all").click()
        queued = page.locator('#update-all-report tr[data-outcome="queued"]')
        expect(queued).to_have_count(5)
        expect(page.locator("#update-all-summary")).to_contain_text("5 will be started on")
        page.screenshot(path=str(ARTIFACTS / "template-update-all-confirm.png"), full_page=True)
        page.get_by_role("button", name="Update 5 workspaces").click()
        expect(page.locator("#update-all-summary")).to_contain_text("5 updates queued")
        expect(queued).to_have_count(5)
        page.screenshot(path=str(ARTIFACTS / "template-update-all-report.png"), full_page=True)

        wait_until(lambda: _all_built_on(deployment, active), 180, "the five updates to build")
        page.goto(f"{deployment.url}/templates/fleet")
        expect(page.locator("#template-workspace-count")).to_have_text("5 workspaces")
        page.screenshot(path=str(ARTIFACTS / "template-workspaces-updated.png"), full_page=True)
        assert problems == [], "\n".join(problems)
    assert {workspace["latest_build"]["job"]["priority"] for workspace in _fleet(deployment)} == {"low"}
