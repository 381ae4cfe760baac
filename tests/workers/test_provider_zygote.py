"""What a build costs (issue 43). The daemon's warm coder provider (workers/provider_zygote.py): builds that share
one zygote each see only their own values, and a zygote that dies or hangs costs a build nothing (the launcher
serves the provider itself) and is replaced before the next job. A workspace's first build, which has nothing to
destroy, is one `terraform apply`. Real Terraform (the bundled one), real processes."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil
import pytest

from protocol.provider_zygote import TIMEOUT_ENV, ZYGOTE_ENV
from tests.workers.conftest import TemplateDir
from tests.workers.test_init_cache import TEMPLATE, run_build
from workers.job_control import RunnerSettings
from workers.provider_zygote import ProviderZygote
from workers.terraform import build_coder_env

Template = Callable[..., TemplateDir]

SOURCE = """
data "coder_workspace" "me" {}
data "coder_workspace_owner" "me" {}
data "coder_external_auth" "github" {
  id = "github"
}
output "seen" {
  value     = join(" ", [data.coder_workspace.me.name, data.coder_workspace.me.transition,
                         data.coder_workspace_owner.me.name, data.coder_external_auth.github.access_token])
  sensitive = true
}
"""


def build_env(index: int, transition: str = "start") -> dict[str, str]:
    return build_coder_env(
        access_url="http://127.0.0.1:1", transition=transition, workspace_name=f"ws{index}",
        workspace_id=f"id{index}", build_id=f"b{index}", owner_name=f"owner{index}", owner_id=f"u{index}",
        owner_email=f"o{index}@example.com", external_auth_tokens={"github": f"token-{index}"},
    )  # fmt: skip


def seen(workspace: TemplateDir, env: dict[str, str]) -> str:
    """What the provider answered this build (one apply: it plans too)."""
    workspace.must("apply", "-input=false", "-auto-approve", env=env)
    return workspace.must("output", "-raw", "seen", env=env)


def wait_listening(zygote: ProviderZygote) -> None:
    """Until the zygote listens (it imports the provider first): a bound, not a sleep that guesses."""
    deadline = time.monotonic() + 120
    assert zygote.socket is not None
    while not zygote.socket.exists():
        assert time.monotonic() < deadline, "the provider zygote did not come up"
        time.sleep(0.05)


@pytest.fixture
def zygote(coder_cli_config: Path) -> Iterator[ProviderZygote]:
    """A zygote of this test's own, to kill or freeze."""
    started = ProviderZygote(coder_cli_config.parent / "home", answer_timeout=1.0)
    started.start()
    wait_listening(started)
    yield started
    started.stop()


def through(workspace: TemplateDir, zygote: ProviderZygote) -> TemplateDir:
    workspace.base_env[ZYGOTE_ENV] = str(zygote.socket)
    return workspace


def test_concurrent_builds_on_one_zygote_each_see_only_their_own_values(
    template: Template, provider_zygote: ProviderZygote
) -> None:
    wait_listening(provider_zygote)
    workspaces = [template(SOURCE, name=f"build{index}") for index in range(3)]
    before = provider_zygote.children_forked()
    assert before is not None

    with ThreadPoolExecutor(max_workers=3) as pool:
        outputs = list(pool.map(lambda index: seen(workspaces[index], build_env(index)), range(3)))

    assert outputs == [f"ws{index} start owner{index} token-{index}" for index in range(3)]
    forked = provider_zygote.children_forked()
    assert forked is not None and forked - before >= 3 * 2  # an apply plans and applies: none served by a launcher
    # The next build of the same workspace gets the next values, not the ones a child saw before.
    assert seen(workspaces[0], build_env(7, "stop")) == "ws7 stop owner7 token-7"


def test_a_zygote_that_died_costs_the_build_nothing_and_is_restarted(
    template: Template, zygote: ProviderZygote
) -> None:
    workspace = through(template(SOURCE), zygote)
    os.kill(zygote.pid or 0, signal.SIGKILL)
    psutil.Process(zygote.pid).wait(timeout=30)

    assert seen(workspace, build_env(1)) == "ws1 start owner1 token-1"  # the launcher served it itself

    zygote.socket_for_job()
    assert zygote.restarts == 1
    wait_listening(zygote)
    assert seen(workspace, build_env(2)) == "ws2 start owner2 token-2"
    assert (zygote.children_forked() or 0) >= 2  # served by the new zygote, not by the launcher


def test_a_hung_zygote_is_bypassed_by_the_build_and_replaced(template: Template, zygote: ProviderZygote) -> None:
    workspace = through(template(SOURCE), zygote)
    hung = psutil.Process(zygote.pid)
    hung.suspend()
    try:
        workspace.base_env[TIMEOUT_ENV] = "1"
        assert seen(workspace, build_env(1)) == "ws1 start owner1 token-1"

        zygote.socket_for_job()  # it does not answer within its second: killed and started again
        assert zygote.restarts == 1
        assert not hung.is_running()
    finally:
        if hung.is_running():
            hung.resume()
    wait_listening(zygote)
    del workspace.base_env[TIMEOUT_ENV]
    assert seen(workspace, build_env(2)) == "ws2 start owner2 token-2"


def test_a_killed_launcher_takes_its_child_with_it(coder_cli_config: Path, zygote: ProviderZygote) -> None:
    """Terraform killed (a forced cancel kills its process group): the child, which is the zygote's, not
    Terraform's, must not serve on."""
    launcher = next(coder_cli_config.parent.rglob("terraform-provider-coder_v2.17.0"))
    env = {"PATH": os.environ["PATH"], ZYGOTE_ENV: str(zygote.socket), **build_env(1)}
    process = subprocess.Popen([launcher], stdout=subprocess.PIPE, env=env)
    assert process.stdout is not None
    assert process.stdout.readline().startswith(b"1|6|unix|")
    children = psutil.Process(zygote.pid).children()
    assert len(children) == 1

    process.kill()
    process.wait()

    children[0].wait(timeout=30)  # the zygote reaps it; this only waits for it to be gone
    assert not children[0].is_running()
    process.stdout.close()


def test_the_daemons_job_flow_hands_terraform_its_zygote(tmp_path: Path, zygote: ProviderZygote) -> None:
    before = zygote.children_forked() or 0
    settings = RunnerSettings(tmp_path / "cache", provider_zygote=zygote)

    run_build(tmp_path / "cache", TEMPLATE, job_id="job-z", settings=settings)

    assert (zygote.children_forked() or 0) - before >= 2  # its plan and its apply


def test_a_first_build_applies_at_once_and_a_later_one_still_plans_for_review(tmp_path: Path) -> None:
    """Protected persistent resources need a plan to review only when there is something to destroy: never in a
    build whose state holds no resources."""
    cache = tmp_path / "cache"
    _, first = run_build(cache, TEMPLATE, job_id="job-1", protect_persistent=True)
    assert first.workspace_build is not None
    assert [timing.stage for timing in first.timings if timing.resource == ""] == ["init", "plan", "apply"]

    _, second = run_build(cache, TEMPLATE, job_id="job-2", protect_persistent=True, state=first.workspace_build.state)

    assert "graph" in [timing.stage for timing in second.timings if timing.resource == ""]  # plan, show, apply
