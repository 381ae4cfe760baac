"""PostgreSQL transactions that only read end with COMMIT (app/core/read_transactions.py): the statements a page runs
stay prepared from one request to the next, and a transaction that wrote is still rolled back."""

from __future__ import annotations

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import select, text, update

from app.core.extensions import db
from app.users.models import User
from tests.conftest import PASSWORD, Persona
from tests.support.web import sign_in

pytestmark = pytest.mark.databases("postgresql")


def _prepared_statements() -> int:
    """How many statements this session's connection (the pool's only one: the test asks one thing at a time)
    holds prepared."""
    return int(db.session.scalar(text("SELECT count(*) FROM pg_prepared_statements")) or 0)


def test_a_pages_statements_stay_prepared_across_requests(
    app: Flask, client: FlaskClient, personas: dict[str, Persona]
) -> None:
    sign_in(client, "alice@example.com", PASSWORD)
    for _ in range(8):  # psycopg prepares a statement its connection has run five times
        assert client.get("/workspaces").status_code == 200
    with app.app_context():
        assert _prepared_statements() > 0
        db.session.rollback()  # this transaction ran only SELECTs too
        prepared = _prepared_statements()
    with app.app_context():
        assert _prepared_statements() == prepared > 0


def test_a_transaction_that_wrote_is_still_rolled_back(app: Flask, personas: dict[str, Persona]) -> None:
    alice = personas["alice"].id
    with app.app_context():
        db.session.scalar(select(User.username).where(User.id == alice))  # a read first, then a write
        db.session.execute(update(User).where(User.id == alice).values(username="mallory"))
        db.session.rollback()
        with_orm = db.session.get(User, alice)
        assert with_orm is not None and with_orm.username == "alice"
        with_orm.username = "trudy"
        db.session.flush()  # flushed, never committed
    with app.app_context():
        assert db.session.scalar(select(User.username).where(User.id == alice)) == "alice"
