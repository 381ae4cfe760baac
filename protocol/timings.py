"""Build timings: when each stage of a job and each resource it touched started and ended (Coder's shape).

A daemon sends them with its job's outcome, an agent with each script it ran; the server stores them and draws the
waterfall. Strings, not Literals, for stages and statuses: a newer sender's new stage must not make the server
refuse the outcome it travels with (an older server stores and shows it as it is).
"""

from __future__ import annotations

from typing import Annotated, Literal

from protocol.codec import Bounds, MaxLength, Message

# Coder's TimingStage values: provisioner stages, then the agent's.
STAGE_INIT = "init"
STAGE_PLAN = "plan"
STAGE_GRAPH = "graph"
STAGE_APPLY = "apply"
STAGE_START = "start"
STAGE_STOP = "stop"
STAGE_CRON = "cron"
STAGE_CONNECT = "connect"
# A stage's own bar (the whole of `terraform plan`, say) rather than one resource's: its resource is empty.
WHOLE_STAGE = ""
MAX_TIMINGS = 2000
MAX_RESOURCE_CHARS = 512
ScriptStatus = Literal["ok", "exit_failure", "timed_out", "pipes_left_open"]


class ProvisionerTiming(Message):
    """One bar of a job's waterfall. Times are RFC 3339 UTC from the daemon's clock."""

    stage: Annotated[str, MaxLength(16)]
    started_at: Annotated[str, MaxLength(40)]
    ended_at: Annotated[str, MaxLength(40)]
    # The provider of the resource ("docker", "coder"), or "terraform" for a whole stage.
    source: Annotated[str, MaxLength(64)] = ""
    # What happened: "create", "read", "delete" …, or "initializing terraform" for init.
    action: Annotated[str, MaxLength(64)] = ""
    # Terraform's address of the resource ("module.x.docker_container.workspace[0]"); WHOLE_STAGE for a stage.
    resource: Annotated[str, MaxLength(MAX_RESOURCE_CHARS)] = WHOLE_STAGE


Timings = Annotated[tuple[ProvisionerTiming, ...], MaxLength(MAX_TIMINGS)]


class ScriptTiming(Message):
    """``POST /script-timings`` from the agent: one script run, once it ended."""

    # The script's log source id (Script.log_source_id), which names it on the server.
    log_source_id: Annotated[str, MaxLength(64)]
    stage: Annotated[str, MaxLength(16)] = STAGE_START
    started_at: Annotated[str, MaxLength(40)]
    ended_at: Annotated[str, MaxLength(40)]
    exit_code: Annotated[int, Bounds(-(2**31), 2**31 - 1)] = 0
    status: Annotated[str, MaxLength(32)] = "ok"
