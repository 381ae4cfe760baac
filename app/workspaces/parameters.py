"""Rich parameter values for a build: resolved (request, previous build, default) and checked here, with the same
rules the ``coder/coder`` provider applies (``protocol/parameters.py``), so a mistake is a 400 naming the parameter
at once instead of a failed build minutes later."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from werkzeug.datastructures import MultiDict

from app.core.errors import InvalidInput
from app.core.validation import FieldErrors, name_values
from protocol.codec import JSON
from protocol.parameters import ParameterError, RichParameter, check_value
from protocol.provisionerd import NameValue


def resolve_parameters(
    declared: Sequence[RichParameter], requested: Mapping[str, str], previous: Mapping[str, str] | None
) -> tuple[NameValue, ...]:
    """The full set of values for a new build. ``previous`` is None for a workspace's first build."""
    errors = FieldErrors()
    names = {parameter.name for parameter in declared}
    for unknown in sorted(set(requested) - names):
        errors.add(unknown, "The template has no parameter with this name.")
    resolved = []
    for parameter in declared:
        name = parameter.name
        earlier = None if previous is None or parameter.ephemeral else previous.get(name)
        if name in requested:
            value = requested[name]
            if value == "" and parameter.required:  # an emptied field is no value (Coder: "is required")
                errors.add(name, "A value is required.")
                continue
            stored = None if previous is None else previous.get(name)
            if stored is not None and value != stored and not parameter.mutable and _still_valid(parameter, stored):
                errors.add(name, "This parameter is immutable: it cannot change after the workspace was created.")
                continue
        elif earlier is not None:
            value = earlier
        elif not parameter.required:
            value = parameter.default_value
        else:
            errors.add(name, "A value is required.")
            continue
        try:
            check_value(parameter, value, None if previous is None else previous.get(name))
        except ParameterError as exc:
            errors.add(name, f"{exc.summary}: {exc}")
            continue
        resolved.append(NameValue(name=name, value=value))
    errors.raise_if_any("Some parameter values are invalid.")
    return tuple(resolved)


def _still_valid(parameter: RichParameter, value: str) -> bool:
    """An immutable value the template's new version no longer accepts (its option was removed, say) must be
    chosen again, or the workspace could never update."""
    try:
        check_value(parameter, value, None)
    except ParameterError:
        return False
    return True


def parameter_values_field(body: Mapping[str, JSON], name: str = "rich_parameter_values") -> dict[str, str]:
    errors = FieldErrors()
    values = name_values(body, name, errors)
    if errors.items:
        raise InvalidInput(f"{name} must be a list of {{name, value}} objects.", validations=errors.items)
    return {item.name: item.value for item in values}


@dataclass(frozen=True)
class ShownParameter:
    """A build's value as a person reads it: under the parameter's display name, an option by its own name."""

    name: str
    label: str
    description: str
    value: str
    shown_value: str
    # None: the build's version no longer declares it (a value kept from an older version).
    declared: RichParameter | None

    @property
    def mutable(self) -> bool:
        return self.declared is not None and self.declared.mutable

    @property
    def ephemeral(self) -> bool:
        return self.declared is not None and self.declared.ephemeral


def shown_parameters(declared: Sequence[RichParameter], values: Sequence[NameValue]) -> list[ShownParameter]:
    """The values in the template's order (``order``, then as declared), then any the version does not declare."""
    by_name = {item.name: item.value for item in values}
    ordered = sorted(enumerate(declared), key=lambda pair: (pair[1].order, pair[0]))
    shown = []
    for _, parameter in ordered:
        if parameter.name not in by_name:
            continue
        value = by_name.pop(parameter.name)
        option_names = {option.value: option.name for option in parameter.options}
        shown.append(
            ShownParameter(
                name=parameter.name,
                label=parameter.display_name or parameter.name,
                description=parameter.description,
                value=value,
                shown_value=option_names.get(value) or value,
                declared=parameter,
            )
        )
    shown += [ShownParameter(name, name, "", value, value, None) for name, value in by_name.items()]
    return shown


def form_parameters(declared: Sequence[RichParameter]) -> list[RichParameter]:
    """A form's parameters in the template's order."""
    return [parameter for _, parameter in sorted(enumerate(declared), key=lambda pair: (pair[1].order, pair[0]))]


def form_values(declared: Sequence[RichParameter], form: MultiDict[str, str], shown: Sequence[str]) -> dict[str, str]:
    """The ``param.<name>`` values a parameter form posted. A checkbox left unticked sends nothing: a bool parameter
    among those ``shown`` on the form is then "false". A list's items come as the multi-select's ticked boxes (none:
    an empty list) or the tag list's lines, and are given as the JSON array the parameter's value is."""
    values = {key[len("param.") :]: value for key, value in form.items() if key.startswith("param.")}
    for parameter in declared:
        if parameter.name not in shown:
            continue
        key = "param." + parameter.name
        if parameter.type == "bool" and parameter.name not in values:
            values[parameter.name] = "false"
        elif parameter.control == "multi-select":
            values[parameter.name] = json.dumps(form.getlist(key))
        elif parameter.control == "tag-select" and not values.get(parameter.name, "").lstrip().startswith("["):
            lines = values.get(parameter.name, "").splitlines()
            values[parameter.name] = json.dumps([line.strip() for line in lines if line.strip()])
    return values


def field_labels(declared: Sequence[RichParameter]) -> dict[str, tuple[str, str]]:
    """What a form's error summary calls each parameter's field, and the id of its input (as
    templates/workspaces/_partials/parameter_fields.html names it)."""
    return {item.name: (item.display_name or item.name, "param-" + item.name.replace(" ", "_")) for item in declared}
