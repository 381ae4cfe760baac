"""Shared shape of our resources and data sources, and the environment helpers they read CODER_* with."""

from __future__ import annotations

import hashlib
import json
import os
import re
import uuid
from typing import Any, ClassVar, Protocol

from tf.iface import DataSource, ReadContext, ReadDataContext, Resource
from tf.schema import Attribute, Schema
from tf.types import Bool, Number, String, TfType, Unknown
from tf.utils import Diagnostics

from workers.coder_provider.framework import UnknownBlocks, known_blocks, restore_unknown_blocks

State = dict[str, Any]


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def env(name: str, default: str = "") -> str:
    return os.environ.get(name) or default


def is_known(value: Any) -> bool:
    """Whether a value is set and known: config values that reference resources not yet created, or module
    variables during validation, are Unknown (a nested block list then reads as `UnknownBlocks`)."""
    return value is not Unknown and value is not None and not isinstance(value, UnknownBlocks)


# The form the SDK's validation.IsUUID accepts (hashicorp/go-uuid): hyphenated, any case.
UUID_PATTERN = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")


def check_uuid(diags: Diagnostics, key: str, value: Any, path: list[Any]) -> None:
    """The SDK's validation.IsUUID, in its words (templates and modules are debugged by searching them)."""
    if is_known(value) and not UUID_PATTERN.match(str(value)):
        diags.add_error(f"Invalid {key}", f'expected "{key}" to be a valid UUID, got {value}', path=path)


def check_not_empty(diags: Diagnostics, key: str, value: Any, path: list[Any]) -> None:
    """The SDK's validation.StringIsNotEmpty, in its words."""
    if value == "":
        diags.add_error(f"Invalid {key}", f'expected "{key}" to not be an empty string, got ', path=path)


def check_one_of(diags: Diagnostics, key: str, value: Any, choices: tuple[str, ...], path: list[Any]) -> None:
    """The SDK's validation.StringInSlice, in its words: `expected merge_strategy to be one of ["a" "b"], got c`."""
    if is_known(value) and value not in choices:
        listed = " ".join(f'"{choice}"' for choice in choices)
        diags.add_error(f"expected {key} to be one of [{listed}], got {value}", "", path=path)


def check_int_between(diags: Diagnostics, key: str, value: Any, low: int, high: int, path: list[Any]) -> None:
    """The SDK's validation.IntBetween, in its words; `key` is the flattened path (`a.0.b`) as the SDK names it."""
    if is_known(value) and not low <= value <= high:
        number = int(value) if float(value).is_integer() else value
        diags.add_error(f"expected {key} to be in the range ({low} - {high}), got {number}", "", path=path)


def check_string_match(diags: Diagnostics, key: str, value: Any, pattern: re.Pattern[str], message: str) -> None:
    """The SDK's validation.StringMatch, in its words: `invalid value for name (must be ...)`."""
    if is_known(value) and not pattern.search(str(value)):
        diags.add_error(f"invalid value for {key} ({message})", "", path=[key])


def check_unique_keys(diags: Diagnostics, items: list[State] | None, owner: str, path: list[Any]) -> None:
    """Coder's provider refuses a metadata key given twice, naming the first repeat: `duplicate agent metadata
    key "cpu"` (``owner`` is agent or resource)."""
    seen: set[Any] = set()
    for item in items or []:
        key = item.get("key")
        if is_known(key) and key in seen:
            diags.add_error(f'duplicate {owner} metadata key "{key}"', "", path=path)
            return
        seen.add(key)


def url_error(value: str) -> str:
    """What Go's url.Parse rejects in an icon or URL (Coder's helpers.ValidateURL), in its words: a `%` not
    followed by two hex digits, or an ASCII control character."""
    if re.search(r"[\x00-\x1f\x7f]", value):
        return f"parse {json.dumps(value)}: net/url: invalid control character in URL"
    match = re.search(r"%(?![0-9a-fA-F]{2})", value)
    if match is None:
        return ""
    return f"parse {json.dumps(value)}: invalid URL escape {json.dumps(value[match.start() : match.start() + 3])}"


def check_url(diags: Diagnostics, key: str, value: Any, path: list[Any]) -> None:
    if isinstance(value, str) and (error := url_error(value)):
        diags.add_error(f"Invalid {key}", error, path=path)


def required(name: str, kind: TfType) -> Attribute:
    return Attribute(name, kind, required=True, requires_replace=True)


def optional(name: str, kind: TfType, default: Any = None, *, sensitive: bool = False) -> Attribute:
    """An optional attribute. With a default it is also computed, so the default shows in plans and state, as the
    real provider's defaults do (`tf` only fills defaults in for computed attributes)."""
    if default is None:
        return Attribute(name, kind, optional=True, requires_replace=True, sensitive=sensitive)
    return Attribute(name, kind, optional=True, computed=True, default=default, requires_replace=True)


def optional_computed(name: str, kind: TfType) -> Attribute:
    """Optional, and set by the provider when the configuration leaves it out (unknown in the plan until then)."""
    return Attribute(name, kind, optional=True, computed=True, requires_replace=True)


def computed(name: str, kind: TfType | None = None, *, sensitive: bool = False) -> Attribute:
    return Attribute(name, kind or String(), computed=True, sensitive=sensitive)


def schema(*attributes: Attribute, blocks: tuple[Any, ...] = (), description: str = "") -> Schema:
    return Schema(version=1, attributes=list(attributes), block_types=list(blocks), description=description or None)


STRING, NUMBER, BOOL = String(), Number(), Bool()


class ProviderConfig(Protocol):
    """What resources need of the provider's configuration (the provider module imports them, not the reverse)."""

    url: str

    @property
    def access_url(self) -> str: ...


class _Declared:
    """What every coder resource and data source declares for `tf`: its type name and its schema."""

    name: ClassVar[str]
    schema_: ClassVar[Schema]

    def __init__(self, provider: ProviderConfig) -> None:
        self.provider = provider

    @classmethod
    def get_name(cls) -> str:
        return cls.name

    @classmethod
    def get_schema(cls) -> Schema:
        return cls.schema_


class CoderResource(_Declared, Resource):  # type: ignore[misc]  # tf ships no type information
    """A provider-local resource: it creates nothing outside Terraform, its state is all there is.

    Subclasses declare `name` and `schema_` and may override `check` (config validation), `shape_plan`
    (computed values known at plan time) and `fill` (computed values set on create).
    """

    def validate(self, diags: Diagnostics, type_name: str, config: State) -> None:
        super().validate(diags, type_name, config)
        if not diags.has_errors():
            self.check(diags, known_blocks(config, self.get_schema().block_types))

    def check(self, diags: Diagnostics, config: State) -> None:
        """Reject invalid configuration; attribute values may still be Unknown here, and blocks `UnknownBlocks`."""

    def shape_plan(self, planned: State) -> State:
        return planned

    def fill(self, state: State) -> State:
        return state

    def plan(self, ctx: Any, current: State | None, planned: State) -> State:
        shaped = self.shape_plan(known_blocks(planned, self.get_schema().block_types))
        return dict(restore_unknown_blocks(shaped))

    def create(self, ctx: Any, planned: State) -> State | None:
        state = dict(planned)
        state["id"] = str(uuid.uuid4())
        return self.fill(state)

    def read(self, ctx: ReadContext, current: State) -> State:
        return current

    def update(self, ctx: Any, current: State, planned: State) -> State:
        # Only nested blocks can change in place (every attribute forces a replacement); computed values stay.
        state = dict(planned)
        for attribute in self.get_schema().attributes:
            if attribute.computed and state.get(attribute.name) is Unknown:
                state[attribute.name] = current.get(attribute.name)
        return state

    def delete(self, ctx: Any, current: State) -> None:
        return None


class CoderDataSource(_Declared, DataSource):  # type: ignore[misc]
    """A data source computed from the provider's configuration and the CODER_* environment.

    Subclasses declare `name` and `schema_`, implement `compute` and may override `check_config` (config
    validation).
    """

    def validate(self, diags: Diagnostics, type_name: str, config: State) -> None:
        super().validate(diags, type_name, config)
        if not diags.has_errors():
            self.check_config(diags, known_blocks(config, self.get_schema().block_types))

    def check_config(self, diags: Diagnostics, config: State) -> None:
        """Reject invalid configuration; attribute values may still be Unknown here, and blocks `UnknownBlocks`
        (Terraform reads the data source, calling `compute`, only once its whole configuration is known)."""

    def read(self, ctx: ReadDataContext, config: State) -> State | None:
        # Terraform wants every attribute back; unset optional ones take their default, as the real provider's SDK
        # gives them, or stay null as in the configuration (`tf` leaves a data source's defaults to us).
        state: State = {}
        for attribute in self.get_schema().attributes:
            value = config.get(attribute.name)
            state[attribute.name] = attribute.default if value is None and attribute.default is not Unknown else value
        for block in self.get_schema().block_types:
            state[block.type_name] = config.get(block.type_name) or []
        return self.compute(ctx.diagnostics, state)

    def compute(self, diags: Diagnostics, state: State) -> State | None:
        raise NotImplementedError
