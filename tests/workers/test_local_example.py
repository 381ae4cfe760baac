"""examples/local under real Terraform and the coder provider, as a daemon builds it: a claim of a prebuilt
workspace (a new owner and name, the running agent's new token) leaves the running process alone, while an update
that replaces the agent restarts the process with the new agent (issue 35 part 7)."""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.deployment import EXAMPLE
from tests.workers.conftest import TemplateDir, resource_values
from tests.workers.test_coder_provider import parameter_env
from workers.provider_zygote import ProviderZygote
from workers.terraform import TerraformBinary


@pytest.fixture
def local(
    tmp_path: Path, terraform: TerraformBinary, coder_cli_config: Path, provider_zygote: ProviderZygote
) -> Iterator[tuple[TemplateDir, dict[str, str]]]:
    directory = tmp_path / "template"
    directory.mkdir()
    shutil.copy(EXAMPLE / "main.tf", directory / "main.tf")
    workspace = TemplateDir(terraform, directory, coder_cli_config, provider_zygote).init()
    base = {"TF_VAR_workspaces_root": str(tmp_path / "workspaces"), "CODER_AGENT_URL": "http://127.0.0.1:9"}
    try:
        yield workspace, base
    finally:  # stops the workspace's process (the example's destroy provisioner)
        workspace.run("apply", "-destroy", "-auto-approve", "-input=false", env=base)


def _build(owner: str, name: str, **extra: str) -> dict[str, str]:
    return {
        "CODER_WORKSPACE_TRANSITION": "start",
        "CODER_WORKSPACE_OWNER": owner,
        "CODER_WORKSPACE_NAME": name,
        "CODER_WORKSPACE_OWNER_EMAIL": f"{owner}@example.com",
        **extra,
    }


def _alive(pid_file: Path) -> bool:
    try:
        os.killpg(int(pid_file.read_text()), 0)
    except ProcessLookupError:
        return False
    return True


def test_a_claim_keeps_the_process_and_an_agent_replaced_by_an_update_restarts_it(
    local: tuple[TemplateDir, dict[str, str]],
) -> None:
    workspace, base = local
    prebuilt = workspace.apply({**base, **_build("prebuilds", "pb-1")})
    agent = resource_values(prebuilt, "coder_agent.main")
    process = resource_values(prebuilt, "terraform_data.process[0]")
    home = Path(resource_values(prebuilt, "terraform_data.home")["output"])
    assert home.name == "pb-1" and home.parent.name == "prebuilds"
    pid = (home / "workspace.pid").read_text()

    running_token = "CODER_RUNNING_WORKSPACE_AGENT_TOKEN_" + hashlib.sha256(agent["id"].encode()).hexdigest()
    claimed = workspace.apply({**base, **_build("carol", "mine", CODER_WORKSPACE_IS_PREBUILD_CLAIM="true"),
                               running_token: "the-new-token"})  # fmt: skip
    kept = resource_values(claimed, "coder_agent.main")
    assert (kept["id"], kept["token"]) == (agent["id"], "the-new-token")
    assert resource_values(claimed, "terraform_data.process[0]")["id"] == process["id"]
    assert (home / "workspace.pid").read_text() == pid and _alive(home / "workspace.pid")
    owner = {item["key"]: item["value"] for item in resource_values(claimed, "coder_metadata.home")["item"]}
    assert (owner["owner"], owner["path"]) == ("carol", str(home))

    # A changed greeting changes the agent's startup script: a new agent, a new token, and the process restarts.
    updated = workspace.apply({**base, **_build("carol", "mine", **parameter_env("greeting", "hi again"))})
    replaced = resource_values(updated, "coder_agent.main")
    assert replaced["id"] != agent["id"] and replaced["token"] not in ("the-new-token", agent["token"])
    assert resource_values(updated, "terraform_data.process[0]")["id"] != process["id"]
    assert (home / "workspace.pid").read_text() != pid and _alive(home / "workspace.pid")
