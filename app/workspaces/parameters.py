"""Rich parameter values for a build: resolved (request, previous build, default) and checked here, with the same
rules the ``coder/coder`` provider applies (``protocol/parameters.py``), so a mistake is a 400 naming the parameter
at once instead of a failed build minutes later."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

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
