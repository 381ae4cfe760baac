"""What a template's plan or state contains, in Coder's terms: resources, their agents, and rich parameters.

Input is the output of `terraform show -json`, either of a saved plan (`planned_values`, `prior_state` and
`configuration`) or of a state (`values`). As in Coder's provisioner (reference §4.6):

- every managed resource whose type does not start with `coder_` is a Resource; it is computational when an agent
  is attached to it, peripheral otherwise;
- a `coder_agent` attaches to the closest resource that depends on it (fewest dependency hops, ties broken by
  address). Dependencies come from the configuration's expression references and `depends_on` for a plan, and
  from the `depends_on` Terraform records in state. Within a resource that has count/for_each, an agent instance
  goes to the instance with the same index key, else the first one;
- `coder_app`, `coder_script` and `coder_env` attach to their agent by `agent_id`, `coder_metadata` to its resource
  by `resource_id`: by value when it is known (state), else by what the expression references (plan);
- `data.coder_parameter` instances become RichParameters.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, Literal, TypeVar

from workers.show_json import Instance, closest_dependent, pick_instance, read_instances

# Coder's provisioner.AgentNameRegex, which is case-insensitive.
AGENT_NAME = re.compile(r"^[a-z0-9](-?[a-z0-9])*$", re.IGNORECASE)
# The first word of a reference that is not a resource: values of these never create a dependency edge.
APP_SLUG = re.compile(r"^[a-z0-9](-?[a-z0-9])*$")
_INSTANCE_TYPE_ATTRIBUTES = ("instance_type", "vm_size", "machine_type")

Lifecycle = Literal["persistent", "ephemeral"]
T = TypeVar("T")


class ParseError(ValueError):
    """The plan or state breaks one of Coder's rules (agent names, parameter names, metadata)."""


# Field names match the provider's attribute names: `_build` fills them from a resource's values, a null value
# meaning the field's default, which is Coder's default for that attribute.
@dataclass(frozen=True)
class MetadataItem:
    key: str = ""
    value: str = ""
    sensitive: bool = False


@dataclass(frozen=True)
class AgentMetadata:
    key: str = ""
    display_name: str = ""
    script: str = ""
    interval: int = 0
    timeout: int = 0
    order: int = 0


@dataclass(frozen=True)
class DisplayApps:
    # Coder's defaults when the block is absent or a field is unset: everything but VS Code Insiders.
    vscode: bool = True
    vscode_insiders: bool = False
    web_terminal: bool = True
    ssh_helper: bool = True
    port_forwarding_helper: bool = True


@dataclass(frozen=True)
class App:
    id: str = ""
    slug: str = ""
    display_name: str = ""
    url: str = ""
    command: str = ""
    icon: str = ""
    share: str = "owner"
    subdomain: bool = False
    external: bool = False
    hidden: bool = False
    open_in: str = "slim-window"
    order: int = 0
    group: str = ""
    healthcheck: dict[str, Any] | None = None


@dataclass(frozen=True)
class Script:
    id: str = ""
    display_name: str = ""
    script: str = ""
    icon: str = ""
    cron: str = ""
    log_path: str = ""
    start_blocks_login: bool = False
    run_on_start: bool = False
    run_on_stop: bool = False
    timeout: int = 0


@dataclass(frozen=True)
class Env:
    name: str = ""
    value: str = ""
    merge_strategy: str = "replace"


@dataclass
class Agent:
    name: str = ""
    id: str = ""
    token: str = ""
    os: str = ""
    arch: str = ""
    auth: str = "token"
    dir: str = ""
    env: dict[str, str] = field(default_factory=dict)
    startup_script: str = ""
    startup_script_behavior: str = "non-blocking"
    shutdown_script: str = ""
    connection_timeout: int = 120
    troubleshooting_url: str = ""
    motd_file: str = ""
    order: int = 0
    metadata: list[AgentMetadata] = field(default_factory=list)
    display_apps: DisplayApps = field(default_factory=DisplayApps)
    apps: list[App] = field(default_factory=list)
    scripts: list[Script] = field(default_factory=list)
    envs: list[Env] = field(default_factory=list)


@dataclass
class Resource:
    name: str
    type: str
    address: str
    index_key: int | str | None = None
    module_path: str = ""
    kind: Literal["computational", "peripheral"] = "peripheral"
    agents: list[Agent] = field(default_factory=list)
    metadata: list[MetadataItem] = field(default_factory=list)
    hide: bool = False
    icon: str = ""
    daily_cost: int = 0
    instance_type: str = ""
    lifecycle: Lifecycle | None = None


@dataclass(frozen=True)
class ParameterOption:
    name: str = ""
    value: str = ""
    description: str = ""
    icon: str = ""


@dataclass(frozen=True)
class RichParameter:
    name: str = ""
    display_name: str = ""
    description: str = ""
    type: str = "string"
    mutable: bool = False
    ephemeral: bool = False
    required: bool = True
    default_value: str = ""
    value: str = ""
    icon: str = ""
    order: int = 0
    form_type: str = ""
    options: list[ParameterOption] = field(default_factory=list)
    validation_regex: str = ""
    validation_error: str = ""
    validation_min: int | None = None
    validation_max: int | None = None
    validation_monotonic: str = ""


@dataclass(frozen=True)
class ExternalAuth:
    id: str = ""
    optional: bool = False


@dataclass
class ParsedResources:
    resources: list[Resource]
    parameters: list[RichParameter]
    external_auth: list[ExternalAuth]


_COERCE: dict[str, Callable[[Any], Any]] = {"str": str, "int": int, "bool": bool}


def _build(cls: type[T], values: Mapping[str, Any], **overrides: Any) -> T:
    """A dataclass from a resource's values: same-named attributes, null meaning the field's default."""
    arguments: dict[str, Any] = {}
    for item in fields(cls):  # type: ignore[arg-type]  # T is always a dataclass here
        value = overrides.get(item.name, values.get(item.name))
        if value is not None:
            arguments[item.name] = _COERCE[item.type](value) if item.type in _COERCE else value
    return cls(**arguments)


def _first_block(values: Mapping[str, Any], key: str) -> dict[str, Any]:
    blocks = values.get(key) or []
    return dict(blocks[0]) if blocks else {}


def _agent(instance: Instance) -> Agent:
    values = instance.values
    return _build(
        Agent,
        values,
        name=instance.name,
        env={str(k): str(v) for k, v in (values.get("env") or {}).items()},
        metadata=[_build(AgentMetadata, item) for item in values.get("metadata") or []],
        display_apps=_build(DisplayApps, _first_block(values, "display_apps")),
    )


def _app(values: Mapping[str, Any], name: str) -> App:
    slug = values.get("slug") or name
    display_name = values.get("display_name") or values.get("name") or slug  # `name` is the deprecated spelling
    return _build(
        App, values, slug=slug, display_name=display_name, healthcheck=_first_block(values, "healthcheck") or None
    )


def _parameter(values: Mapping[str, Any]) -> RichParameter:
    validation = _first_block(values, "validation")
    # Coder's min_disabled/max_disabled: an unset bound is no bound, even where an old schema stored 0.
    low = None if validation.get("min_disabled") else validation.get("min")
    high = None if validation.get("max_disabled") else validation.get("max")
    return _build(
        RichParameter,
        values,
        required=values.get("default") is None,
        default_value=values.get("default"),
        options=[_build(ParameterOption, option) for option in values.get("option") or []],
        validation_regex=validation.get("regex"),
        validation_error=validation.get("error"),
        validation_min=None if low is None else int(low),
        validation_max=None if high is None else int(high),
        validation_monotonic=validation.get("monotonic"),
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


def parse_show_json(document: Mapping[str, Any]) -> ParsedResources:
    """Resources, agents and parameters from `terraform show -json` of a saved plan or of a state."""
    instances = read_instances(document)
    by_config: dict[str, list[Instance]] = {}
    for instance in instances:
        by_config.setdefault(instance.config_address, []).append(instance)
    managed = [i for i in instances if i.mode == "managed"]
    resources = {
        i.address: Resource(
            name=i.name,
            type=i.type,
            address=i.address,
            index_key=i.index,
            module_path=i.module.rstrip("."),
            instance_type=next((str(i.values[k]) for k in _INSTANCE_TYPE_ATTRIBUTES if i.values.get(k)), ""),
        )
        for i in managed
        if not i.type.startswith("coder_")
    }
    computational_candidates = {i.config_address for i in managed if not i.type.startswith("coder_")}
    agent_instances = [i for i in managed if i.type == "coder_agent"]
    _check_names("agent", (i.name for i in agent_instances), AGENT_NAME)
    agents: dict[str, Agent] = {}
    for instance in sorted(agent_instances, key=lambda i: i.address):
        agent = agents[instance.address] = _agent(instance)
        home = closest_dependent(instance, instances, lambda address: address in computational_candidates)
        target = pick_instance(by_config.get(home, []), instance.index) if home else None
        if target is not None:
            # An agent no resource depends on is left out, as Coder does: nothing would ever start it.
            resources[target.address].agents.append(agent)
            resources[target.address].kind = "computational"
    agent_by_instance = {i.address: agents[i.address] for i in agent_instances}
    agents_by_id = {agent.id: agent for agent in agents.values() if agent.id}
    _attach_to_agents(managed, agents_by_id, by_config, agent_by_instance)
    _attach_metadata(managed, resources, by_config)
    parameters = [_parameter(i.values) for i in instances if i.mode == "data" and i.type == "coder_parameter"]
    _check_names("parameter", (p.name for p in parameters))
    auth = {
        str(i.values.get("id")): _build(ExternalAuth, i.values)
        for i in instances
        if i.mode == "data" and i.type in ("coder_external_auth", "coder_git_auth")
    }
    return ParsedResources(
        resources=list(resources.values()),
        parameters=sorted(parameters, key=lambda p: p.order),  # stable: same order keeps the address order
        external_auth=list(auth.values()),
    )


def _attach_to_agents(
    managed: Sequence[Instance],
    agents_by_id: Mapping[str, Agent],
    by_config: Mapping[str, list[Instance]],
    agent_by_instance: Mapping[str, Agent],
) -> None:
    for item in sorted(managed, key=lambda i: i.address):
        if item.type not in ("coder_app", "coder_script", "coder_env"):
            continue
        target = _link(item, "agent_id", agents_by_id, by_config)
        agent = agent_by_instance.get(target.address) if isinstance(target, Instance) else target
        if agent is None:
            continue  # its agent does not exist in this transition (e.g. count = 0 on stop)
        if item.type == "coder_app":
            agent.apps.append(_app(item.values, item.name))
        elif item.type == "coder_script":
            agent.scripts.append(_build(Script, item.values))
        else:
            values = item.values
            agent.envs.append(_build(Env, values))
    _check_names("app slug", (app.slug for agent in agent_by_instance.values() for app in agent.apps), APP_SLUG)


def _attach_metadata(
    managed: Sequence[Instance], resources: Mapping[str, Resource], by_config: Mapping[str, list[Instance]]
) -> None:
    by_id = {i.values["id"]: i for i in managed if isinstance(i.values.get("id"), str) and i.address in resources}
    described: set[str] = set()
    for item in sorted(managed, key=lambda i: i.address):
        if item.type != "coder_metadata":
            continue
        target = _link(item, "resource_id", by_id, by_config)
        if target is None or target.address not in resources:
            continue
        if target.address in described:
            raise ParseError(f"resource {target.address} has more than one coder_metadata")
        described.add(target.address)
        resource, values = resources[target.address], item.values
        resource.hide, resource.icon = bool(values.get("hide")), str(values.get("icon") or "")
        resource.daily_cost = int(values.get("daily_cost") or 0)
        # Items whose value is null (is_null) are dropped, as Coder drops them when it stores metadata.
        resource.metadata = [
            _build(MetadataItem, entry) for entry in values.get("item") or [] if entry.get("value") is not None
        ]


def mark_lifecycles(start_resources: Sequence[Resource], stop_resources: Sequence[Resource]) -> list[Resource]:
    """Start resources marked persistent when the stop plan keeps them, ephemeral when stopping removes them."""
    kept = {resource.address for resource in stop_resources}
    return [
        replace(resource, lifecycle="persistent" if resource.address in kept else "ephemeral")
        for resource in start_resources
    ]


# What daemons send to the server: the same facts as plain JSON values.
def parse_resources(document: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [asdict(resource) for resource in parse_show_json(document).resources]


def parse_parameters(document: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [asdict(parameter) for parameter in parse_show_json(document).parameters]
