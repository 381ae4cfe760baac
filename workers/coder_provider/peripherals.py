"""`coder_app`, `coder_script`, `coder_env`, `coder_metadata`, `coder_external_agent` and `coder_devcontainer`: what
hangs off an agent or a resource."""

from __future__ import annotations

import json
import re
import uuid

from tf.schema import Block
from tf.types import Unknown
from tf.utils import Diagnostics

from protocol.cron import CronError, parse_schedule, unix_format_warning
from workers.coder_provider.base import (
    BOOL,
    NUMBER,
    STRING,
    CoderResource,
    State,
    check_not_empty,
    check_one_of,
    check_string_match,
    check_unique_keys,
    check_url,
    computed,
    is_known,
    optional,
    required,
    schema,
)
from workers.coder_provider.framework import NAME_PATTERN, ListNestedBlock

# Arguments of coder_app that cannot be set together (Coder's ConflictsWith, reported from each side as it does).
APP_CONFLICTS = {
    "command": ("url", "subdomain"),
    "url": ("command",),
    "external": ("healthcheck", "command", "subdomain", "share"),
    "healthcheck": ("command",),
}
# Coder's provider's length limits on an app's texts: (argument, as its error names it, most characters).
APP_TEXT_LIMITS = (("display_name", "display name", 64), ("group", "group name", 64), ("tooltip", "tooltip", 2048))
# What Coder's provider accepts as an environment variable name.
ENV_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


class AppResource(CoderResource):
    name = "app"
    schema_ = schema(
        required("agent_id", STRING),
        required("slug", STRING),
        optional("display_name", STRING),
        optional("name", STRING),  # deprecated, still read by Coder
        optional("icon", STRING),
        optional("url", STRING),
        optional("command", STRING),
        optional("external", BOOL),
        optional("share", STRING, "owner"),
        optional("subdomain", BOOL),
        optional("relative_path", BOOL),  # deprecated
        optional("order", NUMBER),
        optional("hidden", BOOL),
        optional("open_in", STRING, "slim-window"),
        optional("group", STRING),
        optional("tooltip", STRING),
        computed("id"),
        blocks=(
            ListNestedBlock(
                "healthcheck",
                Block(
                    attributes=[required("url", STRING), required("interval", NUMBER), required("threshold", NUMBER)]
                ),
                max_items=1,
            ),
        ),
    )

    def check(self, diags: Diagnostics, config: State) -> None:
        slug = config.get("slug")
        if is_known(slug) and not re.match(NAME_PATTERN, str(slug)):
            diags.add_error(
                f'invalid "coder_app" slug, must be a valid hostname ({json.dumps(NAME_PATTERN)}, cannot contain two'
                f" consecutive hyphens or start/end with a hyphen): {json.dumps(slug)}",
                "",
                path=["slug"],
            )
        for field, label, limit in APP_TEXT_LIMITS:
            value = config.get(field)
            if is_known(value) and len(str(value)) > limit:
                diags.add_error(f"{label} is too long (max {limit} characters)", "", path=[field])
        share = config.get("share")
        if is_known(share) and share not in ("owner", "authenticated", "public"):
            choices = '"owner", "authenticated", "public"'
            diags.add_error(f"invalid app share {json.dumps(share)}, must be one of {choices}", "", path=["share"])
        open_in = config.get("open_in")
        if is_known(open_in) and open_in not in ("slim-window", "tab"):
            diags.add_error(
                f'invalid "coder_app" open_in value, must be one of "tab", "slim-window": {json.dumps(open_in)}',
                "",
                path=["open_in"],
            )
        check_url(diags, "icon", config.get("icon"), ["icon"])
        # An argument not known yet may still turn out unset, so it conflicts with nothing until it is known.
        for field, others in APP_CONFLICTS.items():
            if not is_known(config.get(field)) or config.get(field) == []:
                continue
            for other in others:
                if is_known(config.get(other)) and config.get(other) != []:
                    detail = f'"{field}": conflicts with {other}'
                    diags.add_error("Conflicting configuration arguments", detail, path=[field])


class ScriptResource(CoderResource):
    name = "script"
    schema_ = schema(
        required("agent_id", STRING),
        required("display_name", STRING),
        required("script", STRING),
        optional("icon", STRING),
        optional("cron", STRING),
        optional("log_path", STRING),
        optional("start_blocks_login", BOOL, False),
        optional("run_on_start", BOOL, False),
        optional("run_on_stop", BOOL, False),
        optional("timeout", NUMBER, 0),
        computed("id"),
    )

    def check(self, diags: Diagnostics, config: State) -> None:
        # The real provider's words, which Terraform users search for. (An unknown value counts as set.)
        if not (config.get("run_on_start") or config.get("run_on_stop") or config.get("cron")):
            unset = 'at least one of "run_on_start", "run_on_stop", or "cron" must be set'
            diags.add_error("Invalid coder_script", unset)
        if config.get("start_blocks_login") is True and not config.get("run_on_start"):
            diags.add_error("Invalid coder_script", '"start_blocks_login" can only be set if "run_on_start" is "true"')
        cron = config.get("cron")
        if not is_known(cron) or cron is None:
            return
        try:
            parse_schedule(str(cron))
        except CronError as exc:
            diags.add_error("Invalid coder_script cron", f"{cron} is not a valid cron expression: {exc}", path=["cron"])
            return
        warning = unix_format_warning(str(cron))
        if warning:
            diags.add_warning("coder_script cron runs seconds first", warning, path=["cron"])


class EnvResource(CoderResource):
    name = "env"
    schema_ = schema(
        required("agent_id", STRING),
        required("name", STRING),
        optional("value", STRING),
        optional("merge_strategy", STRING, "replace"),
        computed("id"),
    )

    def check(self, diags: Diagnostics, config: State) -> None:
        strategies = ("replace", "append", "prepend", "error")
        check_one_of(diags, "merge_strategy", config.get("merge_strategy"), strategies, ["merge_strategy"])
        check_string_match(diags, "name", config.get("name"), ENV_NAME, "must be a valid environment variable name")


class MetadataResource(CoderResource):
    name = "metadata"
    schema_ = schema(
        required("resource_id", STRING),
        optional("hide", BOOL),
        optional("icon", STRING),
        optional("daily_cost", NUMBER),
        computed("id"),
        blocks=(
            ListNestedBlock(
                "item",
                Block(
                    attributes=[
                        required("key", STRING),
                        optional("value", STRING),
                        optional("sensitive", BOOL, False),
                        computed("is_null", BOOL),
                    ]
                ),
            ),
        ),
    )

    def check(self, diags: Diagnostics, config: State) -> None:
        check_unique_keys(diags, config.get("item"), "resource", ["item"])

    def shape_plan(self, planned: State) -> State:
        # is_null is derived from value, so it is known whenever the value is, as in Coder's provider.
        items = planned.get("item")
        if isinstance(items, list):
            for item in items:
                # Nested defaults are ours to fill in (`tf` fills top-level ones only).
                if item.get("sensitive") is None:
                    item["sensitive"] = False
                value = item.get("value")
                item["is_null"] = Unknown if value is Unknown else value is None
        return planned

    def fill(self, state: State) -> State:
        return self.shape_plan(state)


class ExternalAgentResource(CoderResource):
    """An agent that runs outside the template's infrastructure; Coder gives its token to whoever starts it."""

    name = "external_agent"
    schema_ = schema(required("agent_id", STRING), computed("id"))


class DevcontainerResource(CoderResource):
    """A Dev Container the agent autostarts; it joins the workspace as a sub-agent of its own."""

    name = "devcontainer"
    schema_ = schema(
        required("agent_id", STRING),
        required("workspace_folder", STRING),
        optional("config_path", STRING),
        computed("subagent_id"),
        computed("id"),
    )

    def check(self, diags: Diagnostics, config: State) -> None:
        check_not_empty(diags, "workspace_folder", config.get("workspace_folder"), ["workspace_folder"])

    def fill(self, state: State) -> State:
        state["subagent_id"] = str(uuid.uuid4())
        return state
