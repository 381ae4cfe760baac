"""``?limit=`` and ``?offset=`` for list APIs, and the ``X-Total-Count`` header that says how many there are;
``?page=`` for the dashboard's lists.

A list answers one page, ``DEFAULT_LIMIT`` rows unless asked (an unbounded answer grows with the deployment: a
10,000-workspace list was seconds of work and megabytes of JSON); a client that wants every row follows
``X-Total-Count`` with ``?offset=``, as the CLI does. The dashboard always shows one page (``PAGE_SIZE`` rows).

Deep pages are read by key, not by offset (app/core/keyset.py): the dashboard's Previous/Next links name the row
they continue from (``?page=41&after=<id>``), and the lists where Coder's API has it take ``?after_id=``. A page
number alone (a bookmark) still works, by offset.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from flask import Response, request, url_for
from sqlalchemy import Select, func, select

from app.core import keyset
from app.core.errors import InvalidInput
from app.core.extensions import db
from app.core.validation import query_int

DEFAULT_LIMIT = 100
MAX_LIMIT = 1000
TOTAL_HEADER = "X-Total-Count"
Item = TypeVar("Item")


@dataclass(frozen=True)
class PageRequest:
    limit: int
    offset: int = 0
    # The id of the row the page starts after (Coder's ``after_id``); ``offset`` then counts from there.
    after_id: str = ""

    @classmethod
    def from_args(cls, default_limit: int = DEFAULT_LIMIT, *, after_id: bool = False) -> PageRequest:
        """From the request's query string; a bad value is a 400 naming the parameter. ``limit=0`` is the default
        (Coder's clients send it to mean "no limit asked"). ``after_id`` for the lists where Coder takes it."""
        limit = query_int("limit", 0, minimum=0, maximum=MAX_LIMIT)
        after = request.args.get("after_id", "").strip() if after_id else ""
        return cls(limit or default_limit, query_int("offset", 0), after)

    def rows(self, query: Select[Any]) -> tuple[list[Any], int]:
        """The page's rows, and how many rows there are in all (the whole list's, ``after_id`` or not)."""
        total = count_rows(query)
        if self.after_id:
            keys = keyset.sort_keys(query)
            values = keyset.key_values(query, keys, self.after_id)
            if values is None:  # Coder's answer: the cursor must name a row of the list
                message = f"Record at after_id ({self.after_id!r}) does not exist."
                raise InvalidInput(message, validations=[{"field": "after_id", "detail": message}])
            query = query.where(keyset.after(keys, values))
        paged = query.offset(self.offset).limit(self.limit)
        return list(db.session.scalars(paged).unique()), total

    def slice(self, items: Sequence[Item]) -> tuple[list[Item], int]:
        """The page of a list already filtered in Python (where the filter cannot be said in SQL), with its total."""
        return list(items[self.offset : self.offset + self.limit]), len(items)


def count_rows(query: Select[Any], *, at_most: int | None = None) -> int:
    """How many rows ``query`` gives, counting no further than ``at_most`` when given."""
    counted = query.order_by(None) if at_most is None else query.order_by(None).limit(at_most)
    return int(db.session.scalar(select(func.count()).select_from(counted.subquery())) or 0)


def with_total(response: Response, total: int) -> Response:
    response.headers[TOTAL_HEADER] = str(total)
    return response


PAGE_SIZE = 25


@dataclass(frozen=True)
class PagePosition:
    """Where a dashboard list's page is: its number, and the row it continues from when a link said so (the last
    row of the page before it, or the first of the page after it). The row, when the list still has it, decides
    what the page shows; the number is what it is called (and how it is found by offset when the row is gone)."""

    number: int = 1
    after: str = ""
    before: str = ""


@dataclass(frozen=True)
class Page:
    """One page of a dashboard list (``?page=``, from 1): its rows, and where it stands among all of them."""

    rows: list[Any]
    number: int
    size: int
    total: int
    # The list's own view, when the page may be shown by another (a form's POST answered with the list).
    endpoint: str = ""
    # Rows were counted only so far (``total`` is a floor): there are more than ``total``.
    more: bool = False
    # The query parameter naming this list's page: a page showing several lists gives each its own.
    param: str = "page"
    # The page was read by key from this row (its position's): its own links and streams keep saying so.
    after: str = ""
    before: str = ""
    # Its links name the row they continue from (the list was asked for by position: ``requested_position``).
    keyed: bool = False

    @classmethod
    def empty(cls) -> Page:
        """No rows: a list whose filter could not be read (the page says why, keeping what was typed)."""
        return cls([], 1, PAGE_SIZE, 0)

    @property
    def count(self) -> int:
        return max(1, -(-self.total // self.size))

    @property
    def first(self) -> int:
        return (self.number - 1) * self.size + 1 if self.rows else 0

    @property
    def last(self) -> int:
        return self.first + len(self.rows) - 1 if self.rows else 0

    @property
    def cursor(self) -> dict[str, str]:
        """The query parameters that say where this page was read from (for its stream's URL)."""
        after, before = cursor_params(self.param)
        return {after: self.after} if self.after else {before: self.before} if self.before else {}

    def link(self, number: int) -> str:
        """This list at page ``number``, keeping its other query parameters (filters, sort). The pages either side
        are named by the row they continue from, so that they are read by key however deep they are."""
        if self.endpoint and self.endpoint != request.endpoint:  # shown by another view (a form's POST)
            pages: dict[str, Any] = {self.param: number}
            return url_for(self.endpoint, **pages)
        values: dict[str, Any] = {**(request.view_args or {}), **request.args.to_dict(), self.param: number}
        if number != self.number:
            after, before = cursor_params(self.param)
            values.pop(after, None)
            values.pop(before, None)
            if self.keyed and self.rows and number == self.number + 1:
                values[after] = self.rows[-1].id
            elif self.keyed and self.rows and number == self.number - 1 and number > 1:
                values[before] = self.rows[0].id
        return url_for(str(request.endpoint), **values)


def cursor_params(param: str = "page") -> tuple[str, str]:
    """The names of a list's "after this row" and "before this row" parameters: ``after`` and ``before`` for
    ``?page=``, prefixed for a page's other lists (``keys_page_after``)."""
    return ("after", "before") if param == "page" else (f"{param}_after", f"{param}_before")


def requested_page(param: str = "page") -> int:
    return query_int(param, 1, minimum=1)


def requested_position(param: str = "page") -> PagePosition:
    after, before = cursor_params(param)
    args = request.args
    return PagePosition(requested_page(param), args.get(after, "").strip(), args.get(before, "").strip())


def page_of(
    query: Select[Any],
    number: int | PagePosition,
    size: int = PAGE_SIZE,
    *,
    endpoint: str = "",
    pages_ahead: int | None = None,
    param: str = "page",
) -> Page:
    """Page ``number`` of the rows; past the end (a bookmark of a list that has shrunk), the last page. With
    ``pages_ahead``, rows are counted only that many pages past this one: a filter each row is tested against
    (a workspace's latest build's status) would otherwise cost as much as the whole list, on every page.
    ``param`` names the page in links (``?page=`` unless the page shows several lists). Given a position that
    names a row the list still has, the page is read by key from that row (and its links do the same)."""
    position = number if isinstance(number, PagePosition) else PagePosition(number)
    keyed = isinstance(number, PagePosition)
    if position.after or position.before:
        page = _keyed_page(query, position, size, pages_ahead)
        if page is not None:
            rows, number, total, more = page
            return Page(rows, number, size, total, endpoint, more, param, position.after, position.before, keyed)
    number = position.number
    at_most = None if pages_ahead is None else (number + pages_ahead) * size + 1
    total = count_rows(query, at_most=at_most)
    more = total == at_most
    total -= int(more)
    number = min(number, max(1, -(-total // size)))
    rows = list(db.session.scalars(query.offset((number - 1) * size).limit(size)).unique())
    return Page(rows, number, size, total, endpoint, more, param, keyed=keyed)


def _keyed_page(
    query: Select[Any], position: PagePosition, size: int, pages_ahead: int | None
) -> tuple[list[Any], int, int, bool] | None:
    """(rows, number, total, more) of the page next to the position's row, or None when the list no longer has
    that row or the page would not be a whole one from it (rows came or went before it): the caller then finds
    the page by its number. As many statements as a first page (its rows and its count) when the sort keys cannot
    be NULL: the row's keys are read inside them."""
    keys = keyset.sort_keys(query)
    row_id = position.after or position.before
    values = keyset.row_keys(query, keys, row_id)
    if values is None:  # a key may be NULL: read its values first
        values = keyset.key_values(query, keys, row_id)
    if values is None:
        return None
    if position.after:
        rows = keyset.rows_after(query, keys, values, size)
    else:
        rows = keyset.rows_before(query, keys, values, size)
    if not rows or (position.before and len(rows) < size):
        return None
    before = (position.number - 1) * size
    if pages_ahead is None:
        total = count_rows(query)
        return rows, min(position.number, max(1, -(-total // size))), max(total, before + len(rows)), False
    # Counted only so far past this page, as the offset path does: from the position's row, not the list's start
    # (the same condition as the page's own rows, so no other row's keys are read). After it come this page's rows
    # then the rest; before it, this page's rows, then that row itself and the rest.
    at_most = pages_ahead * size + 1
    from_position = query.where(keyset.after(keys, values))
    if position.after:
        beyond = count_rows(from_position, at_most=len(rows) + at_most) - len(rows)
    else:
        beyond = 1 + count_rows(from_position, at_most=at_most - 1)
    more = beyond == at_most
    return rows, position.number, before + len(rows) + beyond - int(more), more
