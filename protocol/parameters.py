"""Rich parameters (``data "coder_parameter"``): their declaration, and the one set of rules for their values.

The server checks a build's values with :func:`check_value` before it queues the build, and the ``coder/coder``
provider checks them again inside Terraform with the same function, so the two can never disagree. The rules and
the wording of the errors follow Coder's provider (``provider/parameter.go``) where Terraform users will search for
them, with one deliberate difference: numbers are ASCII decimals, never ``NaN``, ``Inf``, ``8_000`` or other
scripts' digits (Go's ``ParseFloat`` takes the first two, Python's ``float`` all four).

A template's ``regex`` runs on RE2 (``google-re2``), as Coder's runs on Go's ``regexp``: linear in the value's
length whatever the pattern, where Python's backtracking ``re`` takes seconds on ``^[a-z0-9]+([._-]?[a-z0-9]+)*$``
and 28 characters (issue 34, M1). A pattern RE2 cannot express (backreferences, lookarounds) is refused at import.
This is the one module of ``protocol`` that needs more than the standard library: the workspace agent never imports
it (an import-linter contract in pyproject.toml), so its bundle does not carry RE2.
"""

from __future__ import annotations

import functools
import json
import re
from typing import Any, Literal

import re2

from protocol.codec import Message
from protocol.values import MAX_INT64, is_whole_number, parse_decimal

ParameterType = Literal["string", "number", "bool", "list(string)"]
TYPES: tuple[str, ...] = ("string", "number", "bool", "list(string)")
MONOTONIC = ("increasing", "decreasing")
# The form types each type allows, with options and without; the first is the default (Coder's formtype.go).
FORM_TYPES: dict[str, dict[bool, tuple[str, ...]]] = {
    "string": {True: ("radio", "dropdown"), False: ("input", "textarea")},
    "number": {True: ("radio", "dropdown"), False: ("input", "slider")},
    "bool": {True: ("radio", "dropdown"), False: ("checkbox", "switch")},
    "list(string)": {True: ("radio", "multi-select"), False: ("tag-select",)},
}
# A value reaches Terraform as one environment variable (CODER_PARAMETER_<hash>=value), and Linux refuses to start a
# process with any one variable over 128 KiB (MAX_ARG_STRLEN): half that, in UTF-8 bytes, leaves room to spare.
MAX_VALUE_BYTES = 64 * 1024
# RE2's compiled form is bounded by its max_mem (8 MiB by default); the pattern's text needs no more than this.
MAX_REGEX_CHARS = 4096


class ParameterError(ValueError):
    """Why a parameter's declaration or value is invalid: ``summary`` as Coder's diagnostic names it, and the
    detail (``str()``) for the person who has to fix it."""

    def __init__(self, detail: str, summary: str = "Invalid parameter value") -> None:
        super().__init__(detail)
        self.summary = summary


class ParameterOption(Message):
    name: str = ""
    value: str = ""
    description: str = ""
    icon: str = ""


class RichParameter(Message):
    """A parameter as a template version declares it (recorded at import, read at every build)."""

    name: str = ""
    display_name: str = ""
    description: str = ""
    type: str = "string"
    mutable: bool = False
    ephemeral: bool = False
    required: bool = True
    default_value: str = ""
    # What the import's plan computed (the default, or what the import was given).
    value: str = ""
    icon: str = ""
    order: int = 0
    form_type: str = ""
    options: tuple[ParameterOption, ...] = ()
    validation_regex: str = ""
    validation_error: str = ""
    # None: no bound (Coder's min_disabled / max_disabled).
    validation_min: int | None = None
    validation_max: int | None = None
    validation_monotonic: str = ""
    # Whether the declaration has a `validation` block at all: with one, even one that only words the error, Coder
    # reads a bool, a list and a number by the block's stricter rules (a number must then be whole).
    has_validation: bool = False

    @property
    def has_value_rules(self) -> bool:
        return self.validation_min is not None or self.validation_max is not None or bool(self.validation_monotonic)

    @property
    def option_values(self) -> list[str]:
        return [option.value for option in self.options]

    @property
    def control(self) -> str:
        """The form control that asks for it: its ``form_type``, or its type's first (Coder's default) when it names
        none, or one its type does not take (a version imported before the rules)."""
        allowed = FORM_TYPES.get(self.type, {}).get(bool(self.options), ("input",))
        return self.form_type if self.form_type in allowed else allowed[0]

    @property
    def option_type(self) -> str:
        """The type of each option's value: the parameter's own, except for a multi-select list(string), whose
        options are its items (a radio list(string) offers whole lists, each option a JSON array)."""
        multi = self.type == "list(string)" and bool(self.options) and self.form_type == "multi-select"
        return "string" if multi else self.type


def resolve_form_type(parameter: RichParameter) -> str:
    """The parameter's form type: the one it names, or its type's default (Coder's ``ValidateFormType``)."""
    allowed = FORM_TYPES.get(parameter.type, {}).get(bool(parameter.options), ())
    if not allowed:
        raise ParameterError(
            f'"type" attribute={_quoted(parameter.type)} is not supported, choose one of [{" ".join(TYPES)}]',
            "Invalid form_type for parameter",
        )
    form_type = parameter.form_type or allowed[0]
    if form_type not in allowed:
        opposite = FORM_TYPES[parameter.type][not parameter.options]
        where = ""
        if form_type in opposite:
            where = " when options exist" if parameter.options else " when options do not exist"
        raise ParameterError(
            f'"form_type" attribute={_quoted(form_type)} is not supported for "type"={_quoted(parameter.type)}'
            f"{where}, choose one of [{' '.join(allowed)}]",
            "Invalid form_type for parameter",
        )
    return form_type


def _quoted(text: str) -> str:
    """Go's ``%q`` for the texts Coder quotes (close enough: a JSON string)."""
    return json.dumps(text, ensure_ascii=False)


def check_type(kind: str, value: str) -> None:
    """The value has the parameter's type (Coder's ``valueIsType``)."""
    if kind == "number":
        try:
            parse_decimal(value)
        except ValueError:
            raise ParameterError(
                f"{_quoted(value)} is not a number", f'Parameter value is not of type "{kind}"'
            ) from None
    elif kind == "bool":
        if value not in ("true", "false"):
            raise ParameterError(f"{_quoted(value)} is not a bool", f'Parameter value is not of type "{kind}"')
    elif kind == "list(string)":
        list_items(value)
    elif kind != "string":
        raise ParameterError(f"invalid type {_quoted(kind)}: use one of {', '.join(TYPES)}", "Invalid parameter type")


def list_items(value: str) -> list[str]:
    """The items of a ``list(string)`` value, which is a JSON array of strings."""
    try:
        items = json.loads(value, parse_constant=lambda name: None)
    except (ValueError, RecursionError):
        items = None
    if not isinstance(items, list) or not all(isinstance(item, str) for item in items):
        raise ParameterError(
            f"value {_quoted(value)} is not a valid list of strings",
            "When using list(string) type, value must be a json encoded list of strings",
        )
    return items


def check_declaration(parameter: RichParameter, *, check_default: bool = True) -> None:
    """The rules a template's declaration must follow, whatever value it gets (checked at import). The default is
    checked unless ``check_default`` is False (a value was given, as Coder checks only the value it uses)."""
    kind = parameter.type
    if kind not in TYPES:
        raise ParameterError(f"type {_quoted(kind)} must be one of {', '.join(TYPES)}", "Invalid parameter type")
    resolve_form_type(parameter)
    if parameter.ephemeral and not parameter.mutable:
        raise ParameterError("parameter can't be immutable and ephemeral", "Ephemeral parameter must be mutable")
    if parameter.ephemeral and parameter.required:
        raise ParameterError(
            "ephemeral parameter requires the default property", "Ephemeral parameter requires a default"
        )
    _check_validation_block(parameter)
    _check_options(parameter)
    if not parameter.required and check_default:
        check_value(parameter, parameter.default_value, None, what="Default value")


def _check_validation_block(parameter: RichParameter) -> None:
    kind, invalid = parameter.type, "Invalid validation block"
    if kind != "number":
        if parameter.validation_min is not None:
            raise ParameterError(f"a min cannot be specified for a {kind} type", invalid)
        if parameter.validation_max is not None:
            raise ParameterError(f"a max cannot be specified for a {kind} type", invalid)
        if parameter.validation_monotonic:
            raise ParameterError(
                f"monotonic validation can only be specified for number types, not {kind} types", invalid
            )
    elif parameter.validation_monotonic and parameter.validation_monotonic not in MONOTONIC:
        raise ParameterError(
            f"number monotonicity can be either {_quoted(MONOTONIC[0])} or {_quoted(MONOTONIC[1])}", invalid
        )
    if not parameter.validation_regex:
        return
    if kind != "string":
        raise ParameterError(f"a regex cannot be specified for a {kind} type", invalid)
    compiled_regex(parameter.validation_regex)
    if not parameter.validation_error:
        raise ParameterError("an error must be specified with a regex validation", invalid)


def _check_options(parameter: RichParameter) -> None:
    names: set[str] = set()
    values: set[str] = set()
    option_type = parameter.option_type
    for option in parameter.options:
        if option.name in names:
            raise ParameterError(
                f"multiple options found with the same name {_quoted(option.name)}", "Option names must be unique."
            )
        if option.value in values:
            raise ParameterError(
                f"multiple options found with the same value {_quoted(option.value)}", "Option values must be unique."
            )
        try:
            check_type(option_type, option.value)
        except ParameterError as exc:
            raise ParameterError(
                str(exc),
                f"Option {_quoted(option.name)} with value={_quoted(option.value)} is not of type "
                f"{_quoted(option_type)}",
            ) from None
        names.add(option.name)
        values.add(option.value)


def check_value(parameter: RichParameter, value: str, previous: str | None, *, what: str = "Value") -> None:
    """Coder's ``ValidateInput`` for one value: the options first, then the validation block, then the type.
    ``previous`` is the last build's value, for ``monotonic``."""
    _check_text(value, what)
    options = parameter.option_values
    if options:
        if parameter.type == "list(string)" and parameter.option_type == "string":  # multi-select: each item
            missing = [item for item in list_items(value) if item not in options]
            if missing:
                raise ParameterError(
                    f"{what} {_quoted(value)} is not a valid option, values {_quoted(', '.join(missing))} are missing "
                    "from the options",
                    f"{what}s must be a valid option",
                )
        elif value not in options:
            extra = (
                ". The value is empty, did you forget to set it with a default or from user input?" if not value else ""
            )
            raise ParameterError(
                f"the value {_quoted(value)} must be defined as one of options", f"{what} must be a valid option{extra}"
            )
    summary = f"Invalid parameter {what.lower()} according to 'validation' block"
    if parameter.type == "string" and parameter.validation_regex:
        # Go's regexp.MatchString finds a match anywhere in the value, as search does (not fullmatch).
        if compiled_regex(parameter.validation_regex).search(value) is None:
            raise ParameterError(
                f"{_rendered(parameter, value)} (value {_quoted(value)} does not match "
                f"{_quoted(parameter.validation_regex)})",
                summary,
            )
    if parameter.type == "number" and (parameter.has_value_rules or parameter.has_validation):
        _check_number_rules(parameter, value, previous, summary)
    if parameter.has_validation:
        _check_block_types(parameter.type, value, summary)
    check_type(parameter.type, value)


def _check_text(value: str, what: str) -> None:
    """What any value must be before a rule reads it: text an environment variable can carry, of a bounded size."""
    try:
        size = len(value.encode())
    except UnicodeEncodeError:  # a lone surrogate (JSON's "\\ud800"): no UTF-8 text holds it
        raise ParameterError(
            f"{what} holds a lone surrogate (\\ud800-\\udfff), which is not text", "Invalid text"
        ) from None
    if "\x00" in value:
        raise ParameterError(f"{what} holds a NUL character, which no environment variable can carry", "Invalid text")
    if size > MAX_VALUE_BYTES:
        raise ParameterError(
            f"{what} is {size} bytes long; a parameter's value can be at most {MAX_VALUE_BYTES} bytes", "Too long"
        )


@functools.lru_cache(maxsize=256)
def compiled_regex(pattern: str) -> Any:
    """A ``validation`` block's ``regex`` compiled by RE2 (once per pattern in a process), or the
    :class:`ParameterError` that says why RE2 refuses it, naming what to use instead."""
    invalid = "Invalid validation block"
    if len(pattern) > MAX_REGEX_CHARS:
        raise ParameterError(
            f"the regex is {len(pattern)} characters long; at most {MAX_REGEX_CHARS} are allowed", invalid
        )
    options = re2.Options()
    options.log_errors = False  # the error is ours to report, not RE2's to print on stderr
    try:
        return re2.compile(pattern, options)
    except re2.error as exc:
        reason = exc.args[0].decode(errors="replace") if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        raise ParameterError(
            f"compile regex {_quoted(pattern)}: {reason} (regexes use RE2 syntax, as Coder's do: no backreferences, "
            "lookahead or lookbehind; see https://github.com/google/re2/wiki/Syntax)",
            invalid,
        ) from None
    except UnicodeEncodeError:
        raise ParameterError(
            "compile regex: it holds a lone surrogate (\\ud800-\\udfff), which is not text", invalid
        ) from None


def _check_block_types(kind: str, value: str, summary: str) -> None:
    """What Coder's validation block adds for a bool and a list, in its words (they differ from the type check's
    words, which a parameter without the block gets)."""
    if kind == "bool" and value not in ("true", "false"):
        raise ParameterError('boolean value can be either "true" or "false"', summary)
    if kind == "list(string)":
        try:
            list_items(value)
        except ParameterError:
            raise ParameterError(f"value {_quoted(value)} is not valid list of strings", summary) from None


def _check_number_rules(parameter: RichParameter, value: str, previous: str | None, summary: str) -> None:
    # With a validation block Coder reads numbers with strconv.Atoi: whole numbers only.
    number, low, high = _atoi(value), parameter.validation_min, parameter.validation_max
    if number is None:
        raise ParameterError(_rendered(parameter, value) or f"value {_quoted(value[:64])} is not a number", summary)
    if low is not None and number < low:
        raise ParameterError(_rendered(parameter, value) or f"value {number} is less than the minimum {low}", summary)
    if high is not None and number > high:
        raise ParameterError(_rendered(parameter, value) or f"value {number} is more than the maximum {high}", summary)
    monotonic = parameter.validation_monotonic
    # A previous value that is not a whole number is ignored, as Coder does: failing would leave no way out.
    before = None if previous is None else _atoi(previous)
    if monotonic and before is not None:
        if monotonic == "increasing" and number < before:
            raise ParameterError(
                f"parameter value '{number}' must be equal or greater than previous value: {before}", summary
            )
        if monotonic == "decreasing" and number > before:
            raise ParameterError(
                f"parameter value '{number}' must be equal or lower than previous value: {before}", summary
            )


def _atoi(text: str) -> int | None:
    """Go's ``strconv.Atoi`` on a 64-bit platform: a whole number that fits in an int64, or None. Bounding the digits
    first also keeps Python's ``int`` from refusing a 5,000-digit value with a ValueError of its own."""
    if not is_whole_number(text) or len(text.lstrip("+-")) > len(str(MAX_INT64)):
        return None
    number = int(text)
    return number if -MAX_INT64 - 1 <= number <= MAX_INT64 else None


def _rendered(parameter: RichParameter, value: str) -> str:
    """The template's own ``error`` text with ``{min}``, ``{max}`` and ``{value}`` filled in ("" when it has none).
    An unset bound renders as 0, as Coder's does."""
    text = parameter.validation_error
    if not text:
        return ""
    replacements = {
        "{min}": str(parameter.validation_min or 0),
        "{max}": str(parameter.validation_max or 0),
        "{value}": value,
    }
    return re.sub(r"\{min\}|\{max\}|\{value\}", lambda match: replacements[match.group(0)], text)
