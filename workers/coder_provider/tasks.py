"""`resource coder_ai_task` and `data coder_task`: whether this build runs a Coder Task, its id and its prompt.

The provisioner says so through CODER_TASK_ID (a UUID) and CODER_TASK_PROMPT; a plain workspace build sets
neither, and both then report `enabled = false`. Slipway's daemon sets neither today, so templates built on the
registry's agentapi module plan and apply as ordinary workspaces.
"""

from __future__ import annotations

import uuid
from typing import Any

from tf.schema import Block
from tf.types import Unknown
from tf.utils import Diagnostics

from workers.coder_provider.base import (
    BOOL,
    STRING,
    CoderDataSource,
    CoderResource,
    State,
    check_uuid,
    computed,
    env,
    is_known,
    optional_computed,
    required,
    schema,
)
from workers.coder_provider.framework import SetNestedBlock


def task_id() -> uuid.UUID | None:
    """The task this build runs, or None in a workspace build (unset, unparseable or the nil UUID)."""
    try:
        parsed = uuid.UUID(env("CODER_TASK_ID"))
    except ValueError:
        return None
    return None if parsed.int == 0 else parsed


class AITaskResource(CoderResource):
    name = "ai_task"
    schema_ = schema(
        optional_computed("app_id", STRING),
        computed("prompt"),
        computed("enabled", BOOL),
        computed("id"),
        # Deprecated in favour of app_id, still written by older modules.
        blocks=(SetNestedBlock("sidebar_app", Block(attributes=[required("id", STRING)]), max_items=1),),
        description="A Coder Task: the coder_app that is its AI interface.",
    )

    def check(self, diags: Diagnostics, config: State) -> None:
        check_uuid(diags, "app_id", config.get("app_id"), ["app_id"])
        sidebar = config["sidebar_app"]
        for item in sidebar:
            check_uuid(diags, "sidebar_app.0.id", item.get("id"), ["sidebar_app"])
        if is_known(config.get("app_id")) and sidebar:
            diags.add_error("Conflicting configuration arguments", '"app_id": conflicts with sidebar_app')

    def create(self, ctx: Any, planned: State) -> State | None:
        state = dict(planned)
        running = task_id()
        state["id"] = str(running or uuid.uuid4())
        state["enabled"] = running is not None
        state["prompt"] = env("CODER_TASK_PROMPT")
        if not is_known(state.get("app_id")) or not state.get("app_id"):
            sidebar = state.get("sidebar_app") or []
            state["app_id"] = sidebar[0]["id"] if sidebar and sidebar[0].get("id") else None
        if not state["app_id"]:
            ctx.diagnostics.add_error("Invalid coder_ai_task", "'app_id' must be set")
            return None
        return state

    def shape_plan(self, planned: State) -> State:
        # The sidebar app's id is the app_id when it is given the old way, so the plan can say so already.
        sidebar = planned["sidebar_app"]
        if planned.get("app_id") is Unknown and sidebar and is_known(sidebar[0].get("id")):
            planned["app_id"] = sidebar[0]["id"]
        return planned


class TaskDataSource(CoderDataSource):
    name = "task"
    schema_ = schema(computed("id"), computed("prompt"), computed("enabled", BOOL))

    def compute(self, diags: Diagnostics, state: State) -> State | None:
        raw = env("CODER_TASK_ID")
        running = task_id()
        if raw and running is None and raw != str(uuid.UUID(int=0)):
            diags.add_error("Invalid CODER_TASK_ID", f"invalid UUID: {raw!r}")
            return None
        state.update(id=str(running or uuid.uuid4()), enabled=running is not None, prompt=env("CODER_TASK_PROMPT"))
        return state
