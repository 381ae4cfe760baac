"""`data coder_parameter`: a rich parameter's value, from the build's CODER_PARAMETER_* variables, validated.

Errors are Terraform diagnostics that name the parameter, so a build log says which input is wrong and why.
The rules and messages follow Coder's provider (parameter.go) closely enough for users of both to recognise them.
"""

from __future__ import annotations

import os
import uuid

from tf.schema import Block
from tf.utils import Diagnostics

from protocol.parameters import (
    ParameterError,
    ParameterOption,
    RichParameter,
    check_declaration,
    check_value,
    resolve_form_type,
)
from workers.coder_provider.base import (
    BOOL,
    NUMBER,
    STRING,
    CoderDataSource,
    State,
    check_url,
    computed,
    optional,
    required,
    schema,
    sha256_hex,
)
from workers.coder_provider.framework import ListNestedBlock


def parameter_env_name(name: str, *, previous: bool = False) -> str:
    return ("CODER_PARAMETER_PREVIOUS_" if previous else "CODER_PARAMETER_") + sha256_hex(name)


def _bound(validation: State, key: str) -> int | None:
    value = validation.get(key)
    if value is None:
        return None
    if float(value) != int(value):
        raise ParameterError(f"{key} must be a whole number, not {value}", "Invalid validation block")
    return int(value)


def declared(state: State) -> RichParameter:
    """The parameter as the server records it, from the data source's configuration."""
    validation = state["validation"][0] if state["validation"] else {}
    return RichParameter(
        name=state["name"],
        type=state["type"],
        form_type=state.get("form_type") or "",
        mutable=state["mutable"],
        ephemeral=state["ephemeral"],
        required=state["default"] is None,
        default_value=state["default"] or "",
        options=tuple(ParameterOption(name=option["name"], value=option["value"]) for option in state["option"]),
        validation_regex=validation.get("regex") or "",
        validation_error=validation.get("error") or "",
        validation_min=_bound(validation, "min"),
        validation_max=_bound(validation, "max"),
        validation_monotonic=validation.get("monotonic") or "",
        has_validation=bool(state["validation"]),
    )


class ParameterDataSource(CoderDataSource):
    name = "parameter"
    schema_ = schema(
        required("name", STRING),
        optional("display_name", STRING),
        optional("description", STRING),
        optional("type", STRING, "string"),
        optional("form_type", STRING, ""),
        optional("mutable", BOOL, False),
        optional("default", STRING),
        optional("icon", STRING),
        optional("order", NUMBER),
        optional("ephemeral", BOOL, False),
        optional("styling", STRING, "{}"),  # JSON for the form's looks; Coder's default is an empty object
        computed("value"),
        computed("optional", BOOL),
        computed("id"),
        blocks=(
            ListNestedBlock(
                "option",
                Block(
                    attributes=[
                        required("name", STRING),
                        required("value", STRING),
                        optional("description", STRING),
                        optional("icon", STRING),
                    ]
                ),
            ),
            ListNestedBlock(
                "validation",
                Block(
                    attributes=[
                        optional("min", NUMBER),
                        optional("max", NUMBER),
                        optional("monotonic", STRING),
                        optional("regex", STRING),
                        optional("error", STRING),
                        computed("min_disabled", BOOL),
                        computed("max_disabled", BOOL),
                    ]
                ),
                max_items=1,
            ),
        ),
    )

    def check_config(self, diags: Diagnostics, config: State) -> None:
        check_url(diags, "icon", config.get("icon"), ["icon"])
        for index, option in enumerate(config.get("option") or []):
            check_url(diags, "icon", option.get("icon"), ["option", (index,), "icon"])

    def compute(self, diags: Diagnostics, state: State) -> State | None:
        name = state["name"]
        state["id"] = str(uuid.uuid4())
        state["type"] = state["type"] or "string"
        state["mutable"] = bool(state["mutable"])
        state["ephemeral"] = bool(state["ephemeral"])
        state["optional"] = state["default"] is not None
        for validation in state["validation"]:
            # Coder's compatibility flags: a bound that was not set is disabled (0 would otherwise be a bound).
            validation["min_disabled"] = validation.get("min") is None
            validation["max_disabled"] = validation.get("max") is None
        supplied = os.environ.get(parameter_env_name(name))
        value = supplied if supplied is not None else state["default"]
        state["value"] = "" if value is None else value
        try:
            parameter = self.check(
                state, value, os.environ.get(parameter_env_name(name, previous=True)), supplied is None
            )
            state["form_type"] = resolve_form_type(parameter)  # computed, as Coder's provider does
        except ParameterError as exc:
            diags.add_error(f"Invalid parameter {name!r}", f"coder_parameter {name!r}: {exc.summary}: {exc}")
            return None
        # Coder's provider (SDKv2) keeps an empty default out of its state: `default = ""` reads back as null, while
        # `optional` above still says a default was written (modules test for the null: coder/dotfiles).
        if state["default"] == "":
            state["default"] = None
        return state

    @staticmethod
    def check(state: State, value: str | None, previous: str | None, check_default: bool = True) -> RichParameter:
        """The server's own rules (protocol/parameters.py): the declaration, then the value when there is one
        (a template import plans a required parameter without one). The default is checked only when it is the
        value (``check_default``): a valid value given by a person makes an invalid default irrelevant."""
        parameter = declared(state)
        check_declaration(parameter, check_default=check_default)
        if value is not None:
            check_value(parameter, value, previous)
        return parameter
