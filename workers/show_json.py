"""Reading `terraform show -json` (of a saved plan or of a state): resource instances and their dependencies.

Terraform-level facts only; what they mean for Coder is workers/resources.py's business.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

# The first word of a reference that is not a resource: values of these never create a dependency edge.
_NOT_RESOURCES = {"var", "local", "count", "each", "path", "module", "self", "terraform"}
_INDEX = re.compile(r"\[[^\]]*\]")


@dataclass
class Instance:
    """One resource instance of the JSON, with the dependency facts we need about its configuration block."""

    address: str
    config_address: str
    mode: str
    type: str
    name: str
    index: int | str | None
    module: str
    values: dict[str, Any]
    depends: set[str] = field(default_factory=set)
    attribute_refs: dict[str, set[str]] = field(default_factory=dict)


def _walk_modules(module: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    yield from module.get("resources") or []
    for child in module.get("child_modules") or []:
        yield from _walk_modules(child)


def _reference_address(reference: str, module: str) -> str | None:
    """`coder_agent.main[0].token` -> `coder_agent.main`; references to variables, locals etc. -> None."""
    parts = _INDEX.sub("", reference).split(".")
    if parts[0] in _NOT_RESOURCES:
        return None
    size = 3 if parts[0] == "data" else 2
    return module + ".".join(parts[:size]) if len(parts) >= size else None


def _references(expressions: Any) -> Iterator[str]:
    if isinstance(expressions, Mapping):
        for key, value in expressions.items():
            if key == "references" and isinstance(value, list):
                yield from (item for item in value if isinstance(item, str))
            else:
                yield from _references(value)
    elif isinstance(expressions, list):
        for value in expressions:
            yield from _references(value)


def _configured_dependencies(
    module: Mapping[str, Any], prefix: str = ""
) -> dict[str, tuple[set[str], dict[str, set[str]]]]:
    """config address -> (every resource it references or depends on, references per top-level attribute)."""
    found: dict[str, tuple[set[str], dict[str, set[str]]]] = {}
    for resource in module.get("resources") or []:
        expressions = resource.get("expressions") or {}
        per_attribute = {
            name: {a for a in (_reference_address(r, prefix) for r in _references(value)) if a}
            for name, value in expressions.items()
        }
        depends = set().union(*per_attribute.values()) if per_attribute else set()
        depends |= {a for a in (_reference_address(d, prefix) for d in resource.get("depends_on") or []) if a}
        # A provisioner's references tie the resource to what it uses too: a local-exec that runs an agent's
        # init script makes that resource the agent's host.
        provisioned = _references(
            [provisioner.get("expressions") for provisioner in resource.get("provisioners") or []]
        )
        depends |= {a for a in (_reference_address(r, prefix) for r in provisioned) if a}
        found[prefix + resource["address"]] = (depends, per_attribute)
    for name, call in (module.get("module_calls") or {}).items():
        found.update(_configured_dependencies(call.get("module") or {}, f"{prefix}module.{name}."))
    return found


def read_instances(document: Mapping[str, Any]) -> list[Instance]:
    if "planned_values" in document:
        raw = list(_walk_modules(document["planned_values"].get("root_module") or {}))
        planned = {resource["address"] for resource in raw}
        # Data sources are read during planning and recorded in the prior state, not in the planned values.
        prior = (document.get("prior_state") or {}).get("values") or {}
        raw += [r for r in _walk_modules(prior.get("root_module") or {}) if r["address"] not in planned]
        configured = _configured_dependencies((document.get("configuration") or {}).get("root_module") or {})
    else:
        raw = list(_walk_modules((document.get("values") or {}).get("root_module") or {}))
        configured = {}
    instances = []
    for resource in raw:
        address: str = resource["address"]
        config_address = _INDEX.sub("", address)
        mode = resource.get("mode", "managed")
        suffix = ("data." if mode == "data" else "") + f"{resource['type']}.{resource['name']}"
        module = config_address[: -len(suffix)]
        depends, per_attribute = configured.get(config_address, (set(), {}))
        if not configured:  # a state: Terraform recorded the (transitive) dependencies itself
            depends = {_INDEX.sub("", d) for d in resource.get("depends_on") or []}
        instances.append(
            Instance(
                address=address,
                config_address=config_address,
                mode=mode,
                type=resource["type"],
                name=resource["name"],
                index=resource.get("index"),
                module=module,
                values=dict(resource.get("values") or {}),
                depends=set(depends),
                attribute_refs=per_attribute,
            )
        )
    return instances


def pick_instance(candidates: Sequence[Instance], index: int | str | None) -> Instance | None:
    """The instance with the same count/for_each key, else the first one."""
    ordered = sorted(candidates, key=lambda c: str(c.index))
    return next((c for c in ordered if c.index == index), ordered[0] if ordered else None)


def _reduced_dependencies(instances: Sequence[Instance]) -> dict[str, set[str]]:
    """Direct dependencies only: an edge A -> B is dropped when A also reaches B through another dependency.

    State records dependencies transitively while configuration references are direct; reducing both gives the
    graph `terraform graph` draws (it is transitively reduced too), which is what Coder measures distance on.
    """
    direct: dict[str, set[str]] = {}
    for instance in instances:
        direct.setdefault(instance.config_address, set()).update(instance.depends)
    closure: dict[str, set[str]] = {}

    def reach(address: str, visiting: frozenset[str] = frozenset()) -> set[str]:
        if address not in closure:
            found: set[str] = set()
            for dependency in direct.get(address, ()):
                if dependency not in visiting:
                    found |= {dependency} | reach(dependency, visiting | {address})
            closure[address] = found
        return closure[address]

    return {
        address: {d for d in depends if not any(d in reach(other) for other in depends if other != d)}
        for address, depends in direct.items()
    }


def closest_dependent(target: Instance, instances: Sequence[Instance], accept: Callable[[str], bool]) -> str | None:
    """The config address nearest to `target` (fewest dependency hops) among those that depend on it and that
    `accept` takes; ties go to the smallest address. Paths do not pass through other resources of its type."""
    kinds = {instance.config_address: instance.type for instance in instances}
    dependents: dict[str, set[str]] = {}
    for address, depends in _reduced_dependencies(instances).items():
        for dependency in depends:
            dependents.setdefault(dependency, set()).add(address)
    distance = {target.config_address: 0}
    queue = deque([target.config_address])
    while queue:
        current = queue.popleft()
        for dependent in sorted(dependents.get(current, ())):
            if dependent not in distance and kinds.get(dependent) != target.type:
                distance[dependent] = distance[current] + 1
                queue.append(dependent)
    candidates = [(hops, address) for address, hops in distance.items() if hops and accept(address)]
    return min(candidates)[1] if candidates else None
