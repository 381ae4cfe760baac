"""``?limit=`` and ``?offset=`` for list APIs, and the ``X-Total-Count`` header that says how many there are;
``?page=`` for the dashboard's lists.

A list answers one page, ``DEFAULT_LIMIT`` rows unless asked (an unbounded answer grows with the deployment: a
10,000-workspace list was seconds of work and megabytes of JSON); a client that wants every row follows
``X-Total-Count`` with ``?offset=``, as the CLI does. The dashboard always shows one page (``PAGE_SIZE`` rows).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from flask import Response, request, url_for
from sqlalchemy import Select, func, select

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

    @classmethod
    def from_args(cls, default_limit: int = DEFAULT_LIMIT) -> PageRequest:
        """From the request's query string; a bad value is a 400 naming the parameter. ``limit=0`` is the default
        (Coder's clients send it to mean "no limit asked")."""
        limit = query_int("limit", 0, minimum=0, maximum=MAX_LIMIT)
        return cls(limit or default_limit, query_int("offset", 0))

    def rows(self, query: Select[Any]) -> tuple[list[Any], int]:
        """The page's rows, and how many rows there are in all."""
        paged = query.offset(self.offset).limit(self.limit)
        return list(db.session.scalars(paged).unique()), count_rows(query)

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

    def link(self, number: int) -> str:
        """This list at page ``number``, keeping its other query parameters (filters, sort)."""
        if self.endpoint and self.endpoint != request.endpoint:  # shown by another view (a form's POST)
            pages: dict[str, Any] = {self.param: number}
            return url_for(self.endpoint, **pages)
        values: dict[str, Any] = {**(request.view_args or {}), **request.args.to_dict(), self.param: number}
        return url_for(str(request.endpoint), **values)


def requested_page(param: str = "page") -> int:
    return query_int(param, 1, minimum=1)


def page_of(
    query: Select[Any],
    number: int,
    size: int = PAGE_SIZE,
    *,
    endpoint: str = "",
    pages_ahead: int | None = None,
    param: str = "page",
) -> Page:
    """Page ``number`` of the rows; past the end (a bookmark of a list that has shrunk), the last page. With
    ``pages_ahead``, rows are counted only that many pages past this one: a filter each row is tested against
    (a workspace's latest build's status) would otherwise cost as much as the whole list, on every page.
    ``param`` names the page in links (``?page=`` unless the page shows several lists)."""
    at_most = None if pages_ahead is None else (number + pages_ahead) * size + 1
    total = count_rows(query, at_most=at_most)
    more = total == at_most
    total -= int(more)
    number = min(number, max(1, -(-total // size)))
    rows = list(db.session.scalars(query.offset((number - 1) * size).limit(size)).unique())
    return Page(rows, number, size, total, endpoint, more, param)
