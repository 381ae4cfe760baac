"""`resource coder_agent`: the identity (id, token) and bootstrap script of a workspace agent."""

from __future__ import annotations

import uuid
from typing import Any

from tf.schema import Block
from tf.types import Map
from tf.utils import Diagnostics

from workers.coder_provider.base import (
    BOOL,
    NUMBER,
    STRING,
    CoderResource,
    State,
    check_int_between,
    check_one_of,
    check_unique_keys,
    computed,
    env,
    is_known,
    optional,
    required,
    schema,
    sha256_hex,
)
from workers.coder_provider.framework import ListNestedBlock

OPERATING_SYSTEMS = ("linux", "darwin", "windows")
ARCHITECTURES = ("amd64", "armv7", "arm64")
AUTH_TYPES = ("token", "google-instance-identity", "aws-instance-identity", "azure-instance-identity")
CHOICES = {
    "os": OPERATING_SYSTEMS,
    "arch": ARCHITECTURES,
    "auth": AUTH_TYPES,
    "startup_script_behavior": ("blocking", "non-blocking"),
    "api_key_scope": ("all", "no_user_data"),
}

_METADATA = ListNestedBlock(
    "metadata",
    Block(
        attributes=[
            required("key", STRING),
            optional("display_name", STRING),
            required("script", STRING),
            required("interval", NUMBER),
            optional("timeout", NUMBER),
            optional("order", NUMBER),
        ]
    ),
)
# The apps Coder shows for an agent unless its display_apps block says otherwise (Coder's provider defaults).
DISPLAY_APP_DEFAULTS = {
    "vscode": True,
    "vscode_insiders": False,
    "web_terminal": True,
    "ssh_helper": True,
    "port_forwarding_helper": True,
}
_DISPLAY_APPS = ListNestedBlock(
    "display_apps",
    Block(attributes=[optional(name, BOOL, default) for name, default in DISPLAY_APP_DEFAULTS.items()]),
    max_items=1,
)
_RESOURCES_MONITORING = ListNestedBlock(
    "resources_monitoring",
    Block(
        block_types=[
            ListNestedBlock(
                "memory", Block(attributes=[required("enabled", BOOL), required("threshold", NUMBER)]), max_items=1
            ),
            ListNestedBlock(
                "volume",
                Block(attributes=[required("path", STRING), required("enabled", BOOL), required("threshold", NUMBER)]),
            ),
        ]
    ),
    max_items=1,
)


def check_resources_monitoring(diags: Diagnostics, blocks: list[State] | None) -> None:
    """Thresholds are percentages; volumes are distinct absolute paths; the block must watch something. (The
    wording is Coder's provider's: `expected ....threshold to be in the range (0 - 100), got 101`.)"""
    if not blocks:
        return
    monitors = blocks[0]
    memory, volumes = monitors["memory"], monitors["volume"]
    if not memory and not volumes and is_known(memory) and is_known(volumes):
        diags.add_error("resources_monitoring must define at least one monitor", "", path=["resources_monitoring"])
        return
    for index, item in enumerate(memory):
        key = f"resources_monitoring.0.memory.{index}.threshold"
        check_int_between(diags, key, item.get("threshold"), 0, 100, ["resources_monitoring"])
    paths: set[str] = set()
    for index, item in enumerate(volumes):
        key = f"resources_monitoring.0.volume.{index}.threshold"
        check_int_between(diags, key, item.get("threshold"), 0, 100, ["resources_monitoring"])
        path = item.get("path")
        if not is_known(path):
            continue
        if path == "":
            diags.add_error("volume path must not be empty", "", path=["resources_monitoring"])
        elif not path.startswith("/"):
            diags.add_error("volume path must be an absolute path", "", path=["resources_monitoring"])
        elif path in paths:
            diags.add_error(f'duplicate volume path "{path}"', "", path=["resources_monitoring"])
        paths.add(path)


def agent_token() -> str:
    # A prebuilt workspace being claimed keeps its running agent's token; Coder keys it by sha256 of the agent id,
    # which the provider cannot know yet and passes as "".
    return env(f"CODER_RUNNING_WORKSPACE_AGENT_TOKEN_{sha256_hex('')}") or str(uuid.uuid4())


def running_agent_token(agent_id: str) -> str:
    """The token a running agent takes in place (Slipway's claim of a prebuilt workspace), or ""."""
    return env(f"CODER_RUNNING_WORKSPACE_AGENT_TOKEN_{sha256_hex(agent_id)}")


def init_script(os_name: str, arch: str, access_url: str, auth: str) -> str:
    """Coder's bootstrap script for the platform, or a script that fails saying why when none was provided."""
    variable = f"CODER_AGENT_SCRIPT_{os_name}_{arch}"
    script = env(variable)
    if not script:
        message = f"slipway: no agent bootstrap script for {os_name}/{arch} ({variable} was not set)"
        if os_name == "windows":
            return f'Write-Error "{message}"\nexit 1\n'
        return f"#!/bin/sh\necho '{message}' >&2\nexit 1\n"
    return script.replace("${ACCESS_URL}", access_url).replace("${AUTH_TYPE}", auth)


class AgentResource(CoderResource):
    name = "agent"
    schema_ = schema(
        required("os", STRING),
        required("arch", STRING),
        optional("auth", STRING, "token"),
        optional("dir", STRING),
        optional("env", Map(STRING)),
        optional("startup_script", STRING),
        optional("startup_script_behavior", STRING),
        optional("shutdown_script", STRING),
        optional("connection_timeout", NUMBER, 120),
        optional("troubleshooting_url", STRING),
        optional("motd_file", STRING),
        optional("order", NUMBER),
        optional("api_key_scope", STRING, "all"),
        # Deprecated in Coder but still found in older templates.
        optional("login_before_ready", BOOL),
        optional("startup_script_timeout", NUMBER),
        optional("shutdown_script_timeout", NUMBER),
        computed("id"),
        computed("token", sensitive=True),
        computed("init_script"),
        blocks=(_METADATA, _DISPLAY_APPS, _RESOURCES_MONITORING),
        description="A workspace agent: it runs inside the workspace and connects back to Slipway.",
    )

    def check(self, diags: Diagnostics, config: State) -> None:
        for field, choices in CHOICES.items():
            check_one_of(diags, field, config.get(field), choices, [field])
        check_unique_keys(diags, config.get("metadata"), "agent", ["metadata"])
        check_resources_monitoring(diags, config.get("resources_monitoring"))

    def shape_plan(self, planned: State) -> State:
        # `tf` fills defaults in for top-level attributes only; a block's left-out apps get theirs here. (Coder's
        # provider also adds the whole block when it is left out, which only its legacy SDK may do: Terraform
        # rejects a planned block the configuration does not have. Slipway's server does not read the block.)
        for apps in planned.get("display_apps") or []:
            for name, default in DISPLAY_APP_DEFAULTS.items():
                if apps.get(name) is None:
                    apps[name] = default
        return planned

    def plan(self, ctx: Any, current: State | None, planned: State) -> State:
        planned = super().plan(ctx, current, planned)
        # An agent kept by an update may still be handed a new token in place, so that whatever runs it is not
        # replaced: the agent switches to the new token when the server hands it over (a claimed prebuild).
        agent_id = current.get("id") if current is not None else None
        token = running_agent_token(agent_id) if isinstance(agent_id, str) else ""
        if token:
            planned["token"] = token
        return planned

    def fill(self, state: State) -> State:
        state = self.shape_plan(state)
        state["token"] = agent_token()
        state["init_script"] = init_script(
            state["os"], state["arch"], self.provider.access_url, state.get("auth") or "token"
        )
        return state


class AgentInstanceResource(CoderResource):
    """Ties a cloud instance id to an agent (zero-trust instance identity); Slipway needs nothing more than the
    record, as Coder's provider keeps nothing more."""

    name = "agent_instance"
    schema_ = schema(
        required("agent_id", STRING),
        required("instance_id", STRING),
        computed("id"),
        description="Associates an instance ID with an agent for instance-identity authentication.",
    )
