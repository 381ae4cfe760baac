"""An agent's scripts may hold what the template wrote into them, the owner's tokens included: their text goes to
the workspace's owner (and deployment owners, who may open a shell in it anyway), never to a template admin
reading someone else's workspace, on every API path that shows an agent. The rest of each script stays visible."""

from __future__ import annotations

from typing import Any

import pytest
from flask.testing import FlaskClient

from tests.conftest import Persona
from tests.support.daemon import FakeDaemon, held_first_build, import_template

pytestmark = pytest.mark.databases("sqlite")

SCRIPT = "git clone https://oauth2:carol-token-123@git.example.test/team/repo.git"


def scripts_seen(client: FlaskClient, persona: Persona, workspace: dict[str, Any]) -> dict[str, list[str]]:
    """The script text each path shows ``persona``."""
    seen: dict[str, list[str]] = {}
    got = client.get(f"/api/v2/workspaces/{workspace['id']}", headers=persona.auth).json
    agent = got["latest_build"]["resources"][0]["agents"][0]
    seen["workspace"] = [script["script"] for script in agent["scripts"]]
    build_id = got["latest_build"]["id"]
    resources = client.get(f"/api/v2/workspacebuilds/{build_id}/resources", headers=persona.auth).json
    seen["build resources"] = [script["script"] for script in resources[0]["agents"][0]["scripts"]]
    build = client.get(f"/api/v2/workspacebuilds/{build_id}", headers=persona.auth).json
    seen["build"] = [script["script"] for script in build["resources"][0]["agents"][0]["scripts"]]
    listed = client.get("/api/v2/workspaces", headers=persona.auth).json
    mine = [item for item in listed if item["id"] == workspace["id"]]
    seen["list"] = [script["script"] for script in mine[0]["latest_build"]["resources"][0]["agents"][0]["scripts"]]
    single = client.get(f"/api/v2/workspaceagents/{agent['id']}", headers=persona.auth).json
    seen["agent"] = [script["script"] for script in single["scripts"]]
    assert [script["display_name"] for script in single["scripts"]] == ["Clone"]  # the rest stays visible
    return seen


def test_script_text_goes_to_the_owner_and_deployment_owners_not_to_template_admins(
    client: FlaskClient, personas: dict[str, Persona]
) -> None:
    daemon = FakeDaemon(client)
    template = import_template(client, personas, daemon)
    workspace = held_first_build(client, personas, daemon, template)
    agent = {
        "name": "main", "os": "linux", "arch": "amd64", "token": "t0k",
        "scripts": [{"display_name": "Clone", "script": SCRIPT, "run_on_start": True}],
    }  # fmt: skip
    resources = [{"name": "dev", "type": "terraform_data", "agents": [agent]}]
    job_id = workspace["latest_build"]["job"]["id"]
    assert daemon.call(f"/jobs/{job_id}/complete", {"workspace_build": {"resources": resources}}).status_code == 204
    everywhere = ["workspace", "build resources", "build", "list", "agent"]
    assert scripts_seen(client, personas["carol"], workspace) == {path: [SCRIPT] for path in everywhere}
    assert scripts_seen(client, personas["alice"], workspace) == {path: [SCRIPT] for path in everywhere}
    assert scripts_seen(client, personas["bob"], workspace) == {path: [""] for path in everywhere}
