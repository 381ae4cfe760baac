"""Keyset paging: the rows after (or before) one row of a list, in the list's own order.

Offset paging reads and throws away every row before the page, so page 40 of 10,000 costs more than page 1. A
keyset page says instead "the rows whose sort key comes after this row's": with an index on the sort key the
database seeks to that row and reads one page, at any depth. Every list's order already ends with a unique column
(the id, or a build number within a workspace), so the key names exactly one position and pages never overlap.

The order is read from the query itself (its ``ORDER BY``), so a list has one statement of its order and its
``?sort=`` choices all page this way with no list-specific code.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, Select, and_, false, inspect, literal, or_, true, tuple_
from sqlalchemy.sql import operators
from sqlalchemy.sql.elements import UnaryExpression

from app.core.extensions import db


@dataclass(frozen=True)
class SortKey:
    """One column of a list's order: which way it runs and at which end its NULLs sort (when it has any: a
    NOT NULL column's conditions say nothing of them, which would keep the database from seeking its index)."""

    column: ColumnElement[Any]
    descending: bool
    nulls_first: bool
    nullable: bool = True

    def clause(self) -> ColumnElement[Any]:
        """This key in an ``ORDER BY``, its NULLs placed explicitly."""
        ordered = self.column.desc() if self.descending else self.column.asc()
        return ordered.nulls_first() if self.nulls_first else ordered.nulls_last()

    def beyond(self, value: Any) -> ColumnElement[bool]:
        """Rows whose key sorts strictly after ``value``."""
        if value is None:  # after NULL: every value when NULLs come first, nothing when they come last
            return self.column.is_not(None) if self.nulls_first else false()
        past = self.column < value if self.descending else self.column > value
        return past if self.nulls_first or not self.nullable else or_(past, self.column.is_(None))

    def level(self, value: Any) -> ColumnElement[bool]:
        return self.column.is_(None) if value is None else self.column == value

    def from_(self, value: Any) -> ColumnElement[bool]:
        """Rows whose key sorts at or after ``value``: a range the key's index can seek to."""
        if value is None:
            return true() if self.nulls_first else self.column.is_(None)
        reached = self.column <= value if self.descending else self.column >= value
        return reached if self.nulls_first or not self.nullable else or_(reached, self.column.is_(None))

    def turned(self) -> SortKey:
        return SortKey(self.column, not self.descending, not self.nulls_first, self.nullable)


def sort_keys(query: Select[Any]) -> list[SortKey]:
    """The query's ``ORDER BY`` as keys. A key without an explicit NULLs placement sorts NULLs where the database
    does by default (SQLite: as the smallest value; PostgreSQL: as the largest)."""
    nulls_smallest = db.session.get_bind().dialect.name == "sqlite"
    keys = []
    for clause in query._order_by_clauses:  # the list's one statement of its order (see the module's docstring)
        column: ColumnElement[Any] = clause
        descending, nulls_first = False, None
        while isinstance(column, UnaryExpression) and column.modifier is not None:
            if column.modifier is operators.desc_op:
                descending = True
            elif column.modifier is operators.nulls_first_op:
                nulls_first = True
            elif column.modifier is operators.nulls_last_op:
                nulls_first = False
            elif column.modifier is not operators.asc_op:
                break
            column = column.element
        if nulls_first is None:
            nulls_first = nulls_smallest != descending
        keys.append(SortKey(column, descending, nulls_first, bool(getattr(column, "nullable", True))))
    return keys


# A row's sort keys: their values (read from the database), or a subquery of the statement that uses them (one per
# key, or one of them all when they compare as one row value).
RowKeys = Sequence[Any] | ColumnElement[Any]


def _one_row_value(keys: Sequence[SortKey]) -> bool:
    """Keys that run one way and cannot be NULL: a position among them is one row value, ``(created_at, id)``."""
    return not any(key.nullable for key in keys) and len({key.descending for key in keys}) == 1


def after(keys: Sequence[SortKey], values: RowKeys) -> ColumnElement[bool]:
    """Rows that sort strictly after the row whose keys are ``values``.

    Keys that compare as one row value do, ``(created_at, id) < (…, …)``: the database seeks its index on those
    columns to the row itself. Otherwise the first key's range comes first, on its own, so that the database seeks
    to the first row sharing that key, and the OR that follows is tested from there: over every row that ties on the
    first key (many jobs queued in one transaction share a ``created_at``)."""
    if _one_row_value(keys):
        columns = tuple_(*(key.column for key in keys))
        if not isinstance(values, ColumnElement):
            values = tuple_(*(literal(value, key.column.type) for key, value in zip(keys, values, strict=True)))
        return columns < values if keys[0].descending else columns > values
    if isinstance(values, ColumnElement):
        raise TypeError("one subquery of all the keys is only for keys that compare as one row value")

    def strictly_after(index: int) -> ColumnElement[bool]:
        key, value = keys[index], values[index]
        if index == len(keys) - 1:
            return key.beyond(value)
        return or_(key.beyond(value), and_(key.level(value), strictly_after(index + 1)))

    return and_(keys[0].from_(values[0]), strictly_after(0))


def key_values(query: Select[Any], keys: Sequence[SortKey], row_id: str) -> tuple[Any, ...] | None:
    """The sort keys of the row whose id is ``row_id`` when the query lists it, else None (gone, filtered out, or
    never one the caller may see: a cursor says nothing about rows outside the list)."""
    listed = query.column_descriptions[0]["entity"]
    (id_column,) = inspect(listed).primary_key
    with_keys = query.add_columns(*(key.column for key in keys)).where(id_column == row_id).limit(1)
    row = db.session.execute(with_keys).unique().first()
    return None if row is None else tuple(row[1:])


def row_keys(query: Select[Any], keys: Sequence[SortKey], row_id: str) -> RowKeys | None:
    """The sort keys of the row ``row_id`` as a subquery of the statement that uses them (the row read by its
    primary key, and only if the list has it), so that a page by key is one statement, as a first page is; None
    when a key may be NULL (what to compare then depends on the value: ``key_values`` reads it first). A row the
    list does not have gives no keys, so no rows: the caller tells that from the end of the list by finding none."""
    if any(key.nullable for key in keys):
        return None
    (id_column,) = inspect(query.column_descriptions[0]["entity"]).primary_key
    found = query.order_by(None).where(id_column == row_id).correlate(None)
    if _one_row_value(keys):  # one subquery: the database plans and runs the row's lookup once, not once per key
        return found.with_only_columns(*(key.column for key in keys)).scalar_subquery()
    return [found.with_only_columns(key.column).scalar_subquery() for key in keys]


def rows_after(query: Select[Any], keys: Sequence[SortKey], values: RowKeys, limit: int) -> list[Any]:
    return list(db.session.scalars(query.where(after(keys, values)).limit(limit)).unique())


def rows_before(query: Select[Any], keys: Sequence[SortKey], values: RowKeys, limit: int) -> list[Any]:
    """The ``limit`` rows just before the given row, in the list's order: read the other way from it, then turned
    back."""
    turned = [key.turned() for key in keys]
    backwards = query.order_by(None).order_by(*(key.clause() for key in turned))
    return list(reversed(rows_after(backwards, turned, values, limit)))
