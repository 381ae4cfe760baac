"""What a template's plan or state contains, in Coder's terms: resources, their agents, and rich parameters.

Input is the output of `terraform show -json`, either of a saved plan (`planned_values`, `prior_state` and
`configuration`) or of a state (`values`). Output is the protocol's messages (`protocol/resources.py`). As in
Coder's provisioner (reference §4.6):

- every managed resource whose type does not start with `coder_` is a Resource; it is computational when an agent
  is attached to it, peripheral otherwise;
- a `coder_agent` attaches to the closest resource that depends on it (fewest dependency hops, ties broken by
  address). Dependencies come from the configuration's expression references and `depends_on` for a plan, and
  from the `depends_on` Terraform records in state. Within a resource that has count/for_each, an agent instance
  goes to the instance with the same index key, else the first one;
- `coder_app`, `coder_script`, `coder_env` and `coder_devcontainer` attach to their agent by `agent_id`,
  `coder_metadata` to its resource by `resource_id`: by value when it is known (state), else by what the
  expression references (plan); the app a `coder_ai_task` names is marked as the task's (state only);
- `data.coder_parameter` instances become RichParameters, `data.coder_workspace_preset` instances Presets.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from protocol.codec import Message, ProtocolError
from protocol.parameters import RichParameter
from protocol.provisionerd import NameValue, PrebuildSchedule, PrebuildScheduling, Preset
from protocol.resources import (
    Agent,
    App,
    Devcontainer,
    Env,
    ExternalAuth,
    MetadataItem,
    Resource,
    Script,
    SecretRequirement,
)
from workers.coder_provider.presets import check_prebuild_cron, overlapping_schedules, timezone_error
from workers.show_json import Instance, closest_dependent, pick_instance, read_instances

# Coder's provisioner.AgentNameRegex, which is case-insensitive.
AGENT_NAME = re.compile(r"^[a-z0-9](-?[a-z0-9])*$", re.IGNORECASE)
APP_SLUG = re.compile(r"^[a-z0-9](-?[a-z0-9])*$")
_INSTANCE_TYPE_ATTRIBUTES = ("instance_type", "vm_size", "machine_type")

M = TypeVar("M", bound=Message)


class ParseError(ValueError):
    """The plan or state breaks one of Coder's rules (agent names, parameter names, metadata)."""


@dataclass
class ParsedResources:
    resources: list[Resource]
    parameters: list[RichParameter]
    external_auth: list[ExternalAuth]
    presets: list[Preset] = field(default_factory=list)
    secrets: list[SecretRequirement] = field(default_factory=list)


def _without_nulls(value: Any) -> Any:
    """Terraform writes an unset optional attribute as null; to a message, absent means its (Coder's) default."""
    if isinstance(value, Mapping):
        return {key: _without_nulls(item) for key, item in value.items() if item is not None}
    if isinstance(value, list):
        return [_without_nulls(item) for item in value]
    return value


def _build(cls: type[M], values: Mapping[str, Any], what: str, **overrides: Any) -> M:
    """A message from a resource's values: same-named attributes, null meaning the field's default."""
    data = _without_nulls({**values, **overrides})
    try:
        return cls.from_json(data)
    except ProtocolError as exc:
        raise ParseError(f"{what}: {exc}") from None


def _first_block(values: Mapping[str, Any], key: str) -> dict[str, Any]:
    blocks = values.get(key) or []
    return dict(blocks[0]) if blocks else {}


def _agent(instance: Instance) -> Agent:
    values = instance.values
    return _build(
        Agent,
        values,
        instance.address,
        name=instance.name,
        env={str(key): str(value) for key, value in (values.get("env") or {}).items()},
        display_apps=_first_block(values, "display_apps"),
        # Attached below, from their own resources.
        apps=[],
        scripts=[],
        envs=[],
    )


def _app(instance: Instance) -> App:
    values = instance.values
    slug = values.get("slug") or instance.name
    display_name = values.get("display_name") or values.get("name") or slug  # `name` is the deprecated spelling
    healthcheck = _first_block(values, "healthcheck") or None
    return _build(App, values, instance.address, slug=slug, display_name=display_name, healthcheck=healthcheck)


def _parameter(instance: Instance) -> RichParameter:
    values = instance.values
    validation = _first_block(values, "validation")
    # Coder's min_disabled/max_disabled: an unset bound is no bound, even where an old schema stored 0.
    low = None if validation.get("min_disabled") else validation.get("min")
    high = None if validation.get("max_disabled") else validation.get("max")
    return _build(
        RichParameter,
        values,
        instance.address,
        # As Coder's server reads it: required unless the provider says a default was written (`optional`), which
        # also covers `default = ""`, kept out of the state as null. States of old providers have no `optional`.
        required=not values["optional"] if values.get("optional") is not None else values.get("default") is None,
        default_value=values.get("default"),
        options=values.get("option") or [],
        validation_regex=validation.get("regex"),
        validation_error=validation.get("error"),
        validation_min=low,
        validation_max=high,
        validation_monotonic=validation.get("monotonic"),
        has_validation=bool(values.get("validation")),
    )


def _preset(instance: Instance) -> Preset:
    values = instance.values
    prebuilds = _first_block(values, "prebuilds")
    instances = prebuilds.get("instances")
    parameters = values.get("parameters") or {}
    if not isinstance(parameters, Mapping):
        raise ParseError(f"{instance.address}: parameters must be a map of parameter names to values")
    return Preset(
        name=str(values.get("name") or ""),
        parameters=tuple(NameValue(name=str(name), value=str(value)) for name, value in sorted(parameters.items())),
        default=bool(values.get("default")),
        description=str(values.get("description") or ""),
        icon=str(values.get("icon") or ""),
        desired_prebuild_instances=int(instances) if isinstance(instances, int | float) else None,
        prebuild_ttl_seconds=_prebuild_ttl(prebuilds),
        prebuild_scheduling=parse_prebuild_scheduling(instance.address, prebuilds),
    )


def _prebuild_ttl(prebuilds: Mapping[str, Any]) -> int | None:
    ttl = _first_block(prebuilds, "expiration_policy").get("ttl")
    return int(ttl) if isinstance(ttl, int | float) and ttl > 0 else None


def parse_prebuild_scheduling(address: str, prebuilds: Mapping[str, Any]) -> PrebuildScheduling | None:
    """The preset's ``prebuilds.scheduling``, checked as Coder's provider checks it (our provider already refused a
    bad one at plan time; this also covers a state written by another provider), so that the reconciler never
    meets a schedule it cannot read."""
    scheduling = _first_block(prebuilds, "scheduling")
    if not scheduling:
        return None
    timezone = str(scheduling.get("timezone") or "")
    problem = timezone_error(timezone)
    schedules = []
    for schedule in scheduling.get("schedule") or []:
        cron, count = str(schedule.get("cron") or ""), schedule.get("instances")
        problem = problem or check_prebuild_cron(cron)
        if not problem and not (isinstance(count, int | float) and count >= 0):
            problem = f"schedule {cron!r}: instances must be a whole number of at least 0"
        schedules.append((cron, count))
    specs = [cron for cron, _ in schedules]
    problem = problem or overlapping_schedules(specs)
    if problem:
        raise ParseError(f"{address}: prebuilds scheduling: {problem}")
    return PrebuildScheduling(
        timezone=timezone, schedules=tuple(PrebuildSchedule(cron=c, instances=int(n)) for c, n in schedules)
    )


def _link(item: Instance, attribute: str, by_id: Mapping[str, Any], by_config: Mapping[str, list[Instance]]) -> Any:
    """What `item.<attribute>` points at: by the id value when known, else by the expression's references."""
    value = item.values.get(attribute)
    if isinstance(value, str) and value in by_id:
        return by_id[value]
    for address in sorted(item.attribute_refs.get(attribute, ())):
        target = pick_instance(by_config.get(address, []), item.index)
        if target is not None:
            return target
    return None


def _check_names(kind: str, names: Iterable[str], pattern: re.Pattern[str] | None = None) -> None:
    seen: dict[str, str] = {}
    for name in names:
        if not name:
            raise ParseError(f"{kind} name cannot be empty")
        if pattern is not None and not pattern.match(name):
            raise ParseError(
                f"{kind} name {name!r} is invalid: use letters, digits and single hyphens, "
                f"starting and ending with a letter or digit ({pattern.pattern})"
            )
        if name.lower() in seen:
            raise ParseError(f"duplicate {kind} name {name!r} (names must be unique ignoring case)")
        seen[name.lower()] = name


@dataclass
class _AgentParts:
    """What attaches to one agent while the document is read: the agent itself is frozen once complete."""

    agent: Agent
    apps: list[App] = field(default_factory=list)
    scripts: list[Script] = field(default_factory=list)
    envs: list[Env] = field(default_factory=list)
    devcontainers: list[Devcontainer] = field(default_factory=list)

    def complete(self) -> Agent:
        return replace(
            self.agent,
            apps=tuple(self.apps),
            scripts=tuple(self.scripts),
            envs=tuple(self.envs),
            devcontainers=tuple(self.devcontainers),
        )


@dataclass
class _ResourceParts:
    resource: Resource
    agents: list[_AgentParts]
    metadata: Resource | None = None

    def complete(self) -> Resource:
        resource = self.metadata or self.resource
        agents = tuple(parts.complete() for parts in self.agents)
        return replace(resource, agents=agents, kind="computational" if agents else "peripheral")


def parse_show_json(document: Mapping[str, Any]) -> ParsedResources:
    """Resources, agents and parameters from `terraform show -json` of a saved plan or of a state."""
    instances = read_instances(document)
    by_config: dict[str, list[Instance]] = {}
    for instance in instances:
        by_config.setdefault(instance.config_address, []).append(instance)
    managed = [i for i in instances if i.mode == "managed"]
    resources = {
        i.address: _ResourceParts(
            Resource(
                name=i.name,
                type=i.type,
                address=i.address,
                index_key=None if i.index is None else str(i.index),
                module_path=i.module.rstrip("."),
                instance_type=next((str(i.values[k]) for k in _INSTANCE_TYPE_ATTRIBUTES if i.values.get(k)), ""),
            ),
            [],
        )
        for i in managed
        if not i.type.startswith("coder_")
    }
    computational_candidates = {i.config_address for i in managed if not i.type.startswith("coder_")}
    agent_instances = [i for i in managed if i.type == "coder_agent"]
    _check_names("agent", (i.name for i in agent_instances), AGENT_NAME)
    agents: dict[str, _AgentParts] = {}
    for instance in sorted(agent_instances, key=lambda i: i.address):
        parts = agents[instance.address] = _AgentParts(_agent(instance))
        home = closest_dependent(instance, instances, lambda address: address in computational_candidates)
        target = pick_instance(by_config.get(home, []), instance.index) if home else None
        if target is not None:
            # An agent no resource depends on is left out, as Coder does: nothing would ever start it.
            resources[target.address].agents.append(parts)
    _attach_to_agents(managed, agents, by_config)
    _attach_metadata(managed, resources, by_config)
    parameters = [_parameter(i) for i in instances if i.mode == "data" and i.type == "coder_parameter"]
    _check_names("parameter", (p.name for p in parameters))
    presets = [_preset(i) for i in instances if i.mode == "data" and i.type == "coder_workspace_preset"]
    auth = {
        str(i.values.get("id")): _build(ExternalAuth, i.values, i.address)
        for i in instances
        if i.mode == "data" and i.type in ("coder_external_auth", "coder_git_auth")
    }
    return ParsedResources(
        resources=[parts.complete() for parts in resources.values()],
        parameters=sorted(parameters, key=lambda p: p.order),  # stable: same order keeps the address order
        external_auth=list(auth.values()),
        presets=presets,
        secrets=_secrets(instances),
    )


def _secrets(instances: Sequence[Instance]) -> list[SecretRequirement]:
    """The ``data "coder_secret"`` blocks, by the variable or file each reads (as known at plan time: a name
    computed from a resource is not, and such a secret is not declared)."""
    found = {
        SecretRequirement(env=str(i.values.get("env") or ""), file=str(i.values.get("file") or ""))
        for i in instances
        if i.mode == "data" and i.type == "coder_secret"
    }
    return sorted((item for item in found if item.env or item.file), key=lambda item: (item.env, item.file))


def _attach_to_agents(
    managed: Sequence[Instance], agents: Mapping[str, _AgentParts], by_config: Mapping[str, list[Instance]]
) -> None:
    agents_by_id = {parts.agent.id: parts for parts in agents.values() if parts.agent.id}
    for item in sorted(managed, key=lambda i: i.address):
        if item.type not in ("coder_app", "coder_script", "coder_env", "coder_devcontainer"):
            continue
        target = _link(item, "agent_id", agents_by_id, by_config)
        parts = agents.get(target.address) if isinstance(target, Instance) else target
        if parts is None:
            continue  # its agent does not exist in this transition (e.g. count = 0 on stop)
        if item.type == "coder_app":
            parts.apps.append(_app(item))
        elif item.type == "coder_script":
            parts.scripts.append(_build(Script, item.values, item.address))
        elif item.type == "coder_devcontainer":
            parts.devcontainers.append(_build(Devcontainer, item.values, item.address))
        else:
            parts.envs.append(_build(Env, item.values, item.address))
    _check_names("app slug", (app.slug for parts in agents.values() for app in parts.apps), APP_SLUG)
    # Known once applied: a plan does not know the app's id yet, so an import's plan marks none.
    task_apps = {_task_app_id(item) for item in managed if item.type == "coder_ai_task"} - {""}
    for parts in agents.values():
        parts.apps = [replace(app, ai_task=True) if app.id in task_apps else app for app in parts.apps]


def _task_app_id(task: Instance) -> str:
    """The app a ``coder_ai_task`` names: ``app_id``, or the older ``sidebar_app { id }``."""
    sidebar = task.values.get("sidebar_app") or [{}]
    return str(task.values.get("app_id") or sidebar[0].get("id") or "")


def _attach_metadata(
    managed: Sequence[Instance], resources: Mapping[str, _ResourceParts], by_config: Mapping[str, list[Instance]]
) -> None:
    by_id = {i.values["id"]: i for i in managed if isinstance(i.values.get("id"), str) and i.address in resources}
    for item in sorted(managed, key=lambda i: i.address):
        if item.type != "coder_metadata":
            continue
        target = _link(item, "resource_id", by_id, by_config)
        if target is None or target.address not in resources:
            continue
        parts, values = resources[target.address], item.values
        if parts.metadata is not None:
            raise ParseError(f"resource {target.address} has more than one coder_metadata")
        # Items whose value is null (is_null) are dropped, as Coder drops them when it stores metadata.
        items = [
            _build(MetadataItem, entry, item.address)
            for entry in values.get("item") or []
            if entry.get("value") is not None
        ]
        parts.metadata = replace(
            parts.resource,
            hide=bool(values.get("hide")),
            icon=str(values.get("icon") or ""),
            daily_cost=int(values.get("daily_cost") or 0),
            metadata=tuple(items),
        )


def mark_lifecycles(start_resources: Sequence[Resource], stop_resources: Sequence[Resource]) -> list[Resource]:
    """Start resources marked persistent when the stop plan keeps them, ephemeral when stopping removes them."""
    kept = {resource.address for resource in stop_resources}
    return [
        replace(resource, lifecycle="persistent" if resource.address in kept else "ephemeral")
        for resource in start_resources
    ]
