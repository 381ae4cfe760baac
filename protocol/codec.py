"""Typed JSON messages: each is declared once, as a frozen dataclass, and read and written one way.

A message class derives from :class:`Message`; it becomes a keyword-only, frozen dataclass. ``from_json`` checks
every field against its annotation (``str``, ``int``, ``float``, ``bool``, ``bytes`` as base64, ``X | None``,
``Literal[...]``, ``list[X]``, ``tuple[X, ...]``, ``dict[str, X]``, nested messages, and ``Annotated`` bounds) and
raises :class:`ProtocolError` naming the first field that is wrong. A missing field takes its default; a field
with no default is required; unknown fields are ignored, so either side may add fields before the other knows
them. ``to_json`` writes every field.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
import math
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Self, TypeVar, Union, dataclass_transform

# Any JSON value. Read-only container types, so a dict[str, str] or a list of JSON objects is one too.
JSON = str | int | float | bool | None | Sequence["JSON"] | Mapping[str, "JSON"]
JsonObject = dict[str, JSON]
Path = tuple[str | int, ...]
M = TypeVar("M", bound="Message")

# Messages nest a handful of levels; a body nested deeper than Python can parse is an attack, not a message.
NESTING_LIMIT_MESSAGE = "The JSON is nested too deeply."


class ProtocolError(ValueError):
    """A message that does not match its declaration; ``str()`` names the field and what was wrong."""

    def __init__(self, problem: str, path: Path = ()) -> None:
        self.problem = problem
        self.path = path
        super().__init__(f"{format_path(path)}: {problem}" if path else problem)

    @property
    def field(self) -> str:
        return format_path(self.path)


def format_path(path: Path) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return text


@dataclass(frozen=True)
class Bounds:
    """``Annotated[int, Bounds(0, 10)]``: the value must lie within (inclusive)."""

    minimum: int | float | None = None
    maximum: int | float | None = None


@dataclass(frozen=True)
class MaxLength:
    """``Annotated[str, MaxLength(64)]`` (or a list): at most this many characters (items)."""

    limit: int


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not valid JSON")


def loads(raw: str | bytes) -> JSON:
    """Strict JSON: no NaN or Infinity, and a clear error (never a RecursionError) for anything malformed."""
    try:
        value: JSON = json.loads(raw, parse_constant=_reject_constant)
    except RecursionError:
        raise ProtocolError(NESTING_LIMIT_MESSAGE) from None
    except UnicodeDecodeError:
        raise ProtocolError("The body is not UTF-8 text.") from None
    except ValueError as exc:
        raise ProtocolError(f"The body is not valid JSON: {exc}") from None
    return value


def dumps(value: object) -> str:
    return json.dumps(value, separators=(",", ":"), allow_nan=False)


@dataclass_transform(kw_only_default=True, frozen_default=True, field_specifiers=(dataclasses.field,))
class Message:
    """Base of every message that crosses a process boundary (see the module docstring)."""

    __protocol_fields__: ClassVar[tuple[tuple[str, Callable[[object, Path], Any], Any, Any], ...]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        dataclasses.dataclass(frozen=True, kw_only=True)(cls)

    @classmethod
    def from_json(cls, data: object) -> Self:
        return _decode_message(cls, data, ())

    @classmethod
    def loads(cls, raw: str | bytes) -> Self:
        return cls.from_json(loads(raw))

    def to_json(self) -> JsonObject:
        return {name: _encode(getattr(self, name)) for name, *_ in _fields_of(type(self))}

    def dumps(self) -> str:
        return dumps(self.to_json())


def decode_list(cls: type[M], data: object) -> list[M]:
    """A JSON array of messages (a top-level list, as some replies are)."""
    if not isinstance(data, list):
        raise ProtocolError(f"expected a list, got {_kind(data)}")
    return [_decode_message(cls, item, (index,)) for index, item in enumerate(data)]


# -- decoding ----------------------------------------------------------------------------------------------------

_MISSING = dataclasses.MISSING
_decoders: dict[object, Callable[[object, Path], Any]] = {}


def _kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _fields_of(cls: type[Message]) -> tuple[tuple[str, Callable[[object, Path], Any], Any, Any], ...]:
    cached = cls.__dict__.get("__protocol_fields__")
    if cached is not None:
        return cached  # type: ignore[no-any-return]
    hints = typing.get_type_hints(cls, include_extras=True)
    found = tuple(
        (item.name, _decoder_for(hints[item.name]), item.default, item.default_factory)
        for item in dataclasses.fields(cls)  # type: ignore[arg-type]  # every Message subclass is a dataclass
    )
    cls.__protocol_fields__ = found
    return found


def _decode_message(cls: type[M], data: object, path: Path) -> M:
    if not isinstance(data, dict):
        raise ProtocolError(f"expected an object, got {_kind(data)}", path)
    values: dict[str, Any] = {}
    for name, decode, default, factory in _fields_of(cls):
        if name in data:
            values[name] = decode(data[name], (*path, name))
        elif default is _MISSING and factory is _MISSING:
            raise ProtocolError("this field is required", (*path, name))
    return cls(**values)


def _decoder_for(annotation: object) -> Callable[[object, Path], Any]:
    decoder = _decoders.get(annotation)
    if decoder is None:
        decoder = _decoders[annotation] = _build_decoder(annotation)
    return decoder


def _build_decoder(annotation: object) -> Callable[[object, Path], Any]:  # noqa: C901 - one branch per kind
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return _constrained(_decoder_for(args[0]), args[1:])
    if isinstance(annotation, type) and issubclass(annotation, Message):
        message = annotation
        return lambda value, path: _decode_message(message, value, path)
    if annotation is str:
        return _expect(str, "a string")
    if annotation is bool:
        return _expect(bool, "true or false")
    if annotation is int:
        return _decode_int
    if annotation is float:
        return _decode_float
    if annotation is bytes:
        return _decode_bytes
    if annotation is type(None):
        return _expect(type(None), "null")
    if origin is Literal:
        return _literal(args)
    if origin in (Union, types.UnionType):
        return _union(args)
    if origin is list:
        return _sequence(_decoder_for(args[0]), list)
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return _sequence(_decoder_for(args[0]), tuple)
    if origin is dict and args[0] is str:
        return _mapping(_decoder_for(args[1]))
    raise TypeError(f"protocol messages cannot declare a field of type {annotation!r}")


def _expect(kind: type, described: str) -> Callable[[object, Path], Any]:
    def decode(value: object, path: Path) -> object:
        # bool is an int to Python, not to a protocol: True is never a number and 1 never a boolean.
        if type(value) is not kind:
            raise ProtocolError(f"expected {described}, got {_kind(value)}", path)
        return value

    return decode


def _decode_int(value: object, path: Path) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise ProtocolError(f"expected a whole number, got {_kind(value)}", path)
    return value


def _decode_float(value: object, path: Path) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ProtocolError(f"expected a number, got {_kind(value)}", path)
    return float(value)


def _decode_bytes(value: object, path: Path) -> bytes:
    if not isinstance(value, str):
        raise ProtocolError(f"expected base64 text, got {_kind(value)}", path)
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise ProtocolError("expected base64 text", path) from None


def _literal(choices: tuple[object, ...]) -> Callable[[object, Path], Any]:
    shown = ", ".join(repr(choice) for choice in choices)

    def decode(value: object, path: Path) -> object:
        if isinstance(value, bool) or value not in choices:
            raise ProtocolError(f"expected one of {shown}, got {value!r:.60}", path)
        return value

    return decode


def _union(members: tuple[object, ...]) -> Callable[[object, Path], Any]:
    others = [member for member in members if member is not type(None)]
    if len(others) != 1:
        raise TypeError("protocol messages support only optional unions (X | None)")
    inner = _decoder_for(others[0])
    return lambda value, path: None if value is None else inner(value, path)


def _sequence(item: Callable[[object, Path], Any], kind: type) -> Callable[[object, Path], Any]:
    def decode(value: object, path: Path) -> object:
        if not isinstance(value, list):
            raise ProtocolError(f"expected a list, got {_kind(value)}", path)
        return kind(item(element, (*path, index)) for index, element in enumerate(value))

    return decode


def _mapping(item: Callable[[object, Path], Any]) -> Callable[[object, Path], Any]:
    def decode(value: object, path: Path) -> object:
        if not isinstance(value, dict):
            raise ProtocolError(f"expected an object, got {_kind(value)}", path)
        return {key: item(element, (*path, key)) for key, element in value.items()}

    return decode


def _constrained(inner: Callable[[object, Path], Any], rules: tuple[object, ...]) -> Callable[[object, Path], Any]:
    def decode(value: object, path: Path) -> object:
        decoded = inner(value, path)
        for rule in rules:
            if isinstance(rule, Bounds):
                if rule.minimum is not None and decoded < rule.minimum:
                    raise ProtocolError(f"must be at least {rule.minimum}", path)
                if rule.maximum is not None and decoded > rule.maximum:
                    raise ProtocolError(f"must be at most {rule.maximum}", path)
            elif isinstance(rule, MaxLength) and len(decoded) > rule.limit:
                raise ProtocolError(f"must be at most {rule.limit} long", path)
        return decoded

    return decode


# -- encoding ----------------------------------------------------------------------------------------------------


def _encode(value: object) -> JSON:
    if isinstance(value, Message):
        return value.to_json()
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, list | tuple):
        return [_encode(item) for item in value]
    if isinstance(value, dict):
        return {str(key): _encode(item) for key, item in value.items()}
    if value is None or isinstance(value, str | int | float | bool):
        return value
    raise TypeError(f"cannot encode {type(value).__name__} in a protocol message")
