"""`resource coder_agent`: the identity (id, token) and bootstrap script of a workspace agent."""

from __future__ import annotations

import uuid

from tf.schema import Block
from tf.types import Map
from tf.utils import Diagnostics

from workers.coder_provider.base import (
    BOOL,
    NUMBER,
    STRING,
    CoderResource,
    State,
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


def agent_token() -> str:
    # A prebuilt workspace being claimed keeps its running agent's token; Coder keys it by sha256 of the agent id,
    # which the provider cannot know yet and passes as "".
    return env(f"CODER_RUNNING_WORKSPACE_AGENT_TOKEN_{sha256_hex('')}") or str(uuid.uuid4())


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
            value = config.get(field)
            if is_known(value) and value not in choices:
                diags.add_error(
                    f"Invalid coder_agent {field}",
                    f"{field} is {value!r}; it must be one of {', '.join(choices)}",
                    path=[field],
                )
        keys = [item.get("key") for item in config.get("metadata") or [] if is_known(item.get("key"))]
        duplicates = sorted({key for key in keys if keys.count(key) > 1})
        if duplicates:
            diags.add_error("Duplicate coder_agent metadata key", f"metadata keys must be unique: {duplicates}")

    def shape_plan(self, planned: State) -> State:
        # `tf` fills defaults in for top-level attributes only; a block's left-out apps get theirs here. (Coder's
        # provider also adds the whole block when it is left out, which only its legacy SDK may do: Terraform
        # rejects a planned block the configuration does not have. Slipway's server does not read the block.)
        for apps in planned.get("display_apps") or []:
            for name, default in DISPLAY_APP_DEFAULTS.items():
                if apps.get(name) is None:
                    apps[name] = default
        return planned

    def fill(self, state: State) -> State:
        state = self.shape_plan(state)
        state["token"] = agent_token()
        state["init_script"] = init_script(
            state["os"], state["arch"], self.provider.access_url, state.get("auth") or "token"
        )
        return state
