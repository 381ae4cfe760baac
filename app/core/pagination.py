"""``?limit=`` and ``?offset=`` for list APIs, and the ``X-Total-Count`` header that says how many there are.

Lists answer every row when no limit is asked for (what the API always did, and what scripts rely on); a client
that pages asks for a limit and follows the total.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from flask import Response
from sqlalchemy import Select, func, select

from app.core.extensions import db
from app.core.validation import query_int

MAX_LIMIT = 1000
TOTAL_HEADER = "X-Total-Count"


@dataclass(frozen=True)
class PageRequest:
    limit: int | None
    offset: int = 0

    @classmethod
    def from_args(cls) -> PageRequest:
        """From the request's query string; a bad value is a 400 naming the parameter."""
        limit = query_int("limit", 0, minimum=0, maximum=MAX_LIMIT)
        return cls(limit or None, query_int("offset", 0))

    def rows(self, query: Select[Any]) -> tuple[list[Any], int | None]:
        """The page's rows, and the total count when the page is not everything (None when it is)."""
        if self.limit is None and not self.offset:
            return list(db.session.scalars(query).unique()), None
        total = db.session.scalar(select(func.count()).select_from(query.order_by(None).subquery())) or 0
        paged = query.offset(self.offset)
        if self.limit is not None:
            paged = paged.limit(self.limit)
        return list(db.session.scalars(paged).unique()), int(total)


def with_total(response: Response, total: int | None, shown: int) -> Response:
    response.headers[TOTAL_HEADER] = str(shown if total is None else total)
    return response
