"""Coder's list filters (``?q=``): ``key:value`` terms separated by spaces (quote a value with spaces), a bare word
meaning the list's own key (a name). Each list says its keys and what a value of each looks like; a term it cannot
read is a 400 that says what it takes, in the API and in the dashboard's search boxes alike. And the orders a list
can be read in (``?sort=``), which its column headers offer.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any, TypeVar

from sqlalchemy import ColumnElement, Select
from sqlalchemy.orm import QueryableAttribute

from app.core.errors import InvalidInput

Row = TypeVar("Row")
Orders = Mapping[str, tuple[ColumnElement[Any] | QueryableAttribute[Any], ...]]


def parse_terms(text: str, examples: Mapping[str, str], bare: str = "name") -> dict[str, str]:
    """The terms ``text`` says, by key; ``examples`` (key → a value it takes) are the keys this list knows."""
    try:
        words = shlex.split(text)
    except ValueError:
        raise bad_filter("A quote is not closed.") from None
    terms: dict[str, str] = {}
    for word in words:
        key, colon, value = word.partition(":")
        key, value = (key.lower(), value.strip()) if colon else (bare, word)
        if key not in examples:
            raise bad_filter(f"Unknown filter {key!r}: use {', '.join(f'{name}:' for name in examples)}.")
        if not value:
            raise bad_filter(f"{key}: needs a value, as in {key}:{examples[key]}.")
        if key in terms and terms[key] != value:
            raise bad_filter(f"{key}: is given twice ({terms[key]!r} and {value!r}); use it once.")
        terms[key] = value
    return terms


def one_of(terms: Mapping[str, str], key: str, allowed: tuple[str, ...]) -> str | None:
    """The term ``key`` (lower case) when it is one of ``allowed``; None when not given."""
    value = terms.get(key, "").lower() or None
    if value is not None and value not in allowed:
        raise bad_filter(f"Unknown {key} {value!r}: use {', '.join(allowed)}.")
    return value


def true_or_false(terms: Mapping[str, str], key: str) -> bool | None:
    """The term ``key`` as a yes or no (``true``/``false``); None when not given."""
    value = terms.get(key, "").lower() or None
    if value not in (None, "true", "false"):
        raise bad_filter(f"{key}: takes true or false, not {value!r}.")
    return None if value is None else value == "true"


def bad_filter(message: str) -> InvalidInput:
    return InvalidInput(message, validations=[{"field": "q", "detail": message}])


def ordered(query: Select[Row], sort: str, orders: Orders, default: str) -> Select[Row]:
    """``query`` in the order ``sort`` names (``default`` when blank), from the list's ``orders``: each ends with
    the id, so that pages never overlap, and ``-name`` reads it the other way. An unknown one is a 400 listing them."""
    columns = orders.get(sort or default)
    if columns is None:
        message = f"Unknown sort {sort!r}: use {', '.join(orders)}."
        raise InvalidInput(message, validations=[{"field": "sort", "detail": message}])
    return query.order_by(None).order_by(*columns)
