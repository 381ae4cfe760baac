"""Issue 38 benchmark: the connection log's page and API with many rows, on PostgreSQL, in process (only the
server's work is timed: routing, SQL, rendering).

Rows are inserted in bulk (a year of SSH sessions, terminals, port forwards and app sessions over 10,000
workspaces and 2,000 people); then p50/p99 of each page and API call, unfiltered and with each filter, after
--warmup untimed calls. Target p99 <= 100 ms.

    .venv/bin/python bench/connection_log.py [--rows 1000000] [--requests 100] [--warmup 5]
"""

from __future__ import annotations

import argparse
import random
import re
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from flask.testing import FlaskClient
from flask_migrate import upgrade
from sqlalchemy import insert, text

from app.connectionlog.models import REASONS, TYPES, VIA_HTTP, VIA_TUNNEL, ConnectionLog
from app.core.config import load_settings
from app.core.extensions import db
from app.factory import create_app
from app.users import services as users
from bench._harness import percentile, postgres_and_redis

PASSWORD = "bench-password-1"
WORKSPACES, PEOPLE, BATCH = 10_000, 2_000, 20_000
START = datetime(2025, 11, 28, tzinfo=UTC)


def seed(rows: int, people: dict[int, str]) -> None:
    rng = random.Random(38)
    workspaces = [str(uuid.uuid4()) for _ in range(WORKSPACES)]
    template = str(uuid.uuid4())
    for first in range(0, rows, BATCH):
        batch = []
        for number in range(first, min(first + BATCH, rows)):
            kind = TYPES[number % len(TYPES)]
            began = START + timedelta(seconds=number * 365 * 86400 // rows)
            person, owner = number % PEOPLE, (number % WORKSPACES) % PEOPLE
            open_now = number >= rows - 50  # the newest few are still open
            batch.append({
                "id": str(uuid.uuid4()), "connect_time": began, "last_seen_at": began,
                "disconnect_time": None if open_now else began + timedelta(minutes=rng.randint(1, 240)),
                "disconnect_reason": None if open_now else REASONS[number % len(REASONS)],
                "type": kind, "via": VIA_HTTP if kind == "workspace_app" else VIA_TUNNEL,
                "user_id": people.get(person, f"00000000-0000-0000-0000-{person:012d}"), "username": f"user{person}",
                "organization_id": "", "workspace_id": workspaces[number % WORKSPACES],
                "workspace_name": f"ws{number % WORKSPACES}",
                "workspace_owner_id": people.get(owner, f"00000000-0000-0000-0000-{owner:012d}"),
                "workspace_owner_username": f"user{owner}", "template_id": template,
                "agent_name": "main", "slug_or_port": "code" if kind == "workspace_app" else "",
                "ip": "203.0.113.7", "user_agent": "Mozilla/5.0 (bench)",
            })  # fmt: skip
        db.session.execute(insert(ConnectionLog), batch)
        db.session.commit()
    db.session.execute(text("ANALYZE connection_logs"))
    db.session.commit()


def signed_in(client: FlaskClient) -> dict[str, str]:
    first = {"username": "owner", "email": "owner@example.com", "password": PASSWORD}
    assert client.post("/api/v2/users/first", json=first).status_code == 201
    login = client.post("/api/v2/users/login", json={"email": first["email"], "password": PASSWORD}).json
    assert login is not None
    token = login["session_token"]
    page = client.get("/login").get_data(as_text=True)
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', page)
    assert csrf is not None
    form = {"email": first["email"], "password": PASSWORD, "csrf_token": csrf.group(1)}
    assert client.post("/login", data=form).status_code == 302
    return {"Authorization": f"Bearer {token}"}


QUERIES = {
    "all": "",
    "username": "username:user42",
    "workspace_owner": "workspace_owner:user7",
    "type": "type:ssh",
    "ongoing": "status:ongoing",
    "a week": "connected_after:2026-06-01 connected_before:2026-06-08",
    "user and type": "user42 type:workspace_app",
}


def time_calls(client: FlaskClient, auth: dict[str, str], requests: int, warmup: int) -> dict[str, tuple[float, float]]:
    figures = {}
    for label, q in QUERIES.items():
        for what, path, headers in (("page", "/connectionlog", {}), ("API", "/api/v2/connectionlog", auth)):
            for _ in range(warmup):
                assert client.get(path, query_string={"q": q}, headers=headers).status_code == 200, label
            samples = []
            for _ in range(requests):
                began = time.perf_counter()
                reply = client.get(path, query_string={"q": q}, headers=headers)
                samples.append((time.perf_counter() - began) * 1000)
                assert reply.status_code == 200, (label, reply.status_code)
            figures[f"{what} {label}"] = (percentile(samples, 0.5), percentile(samples, 0.99))
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--requests", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=5)
    args = parser.parse_args()
    with postgres_and_redis("connlog") as (_, external):
        env = {"SLIPWAY_DATA_DIR": tempfile.mkdtemp(prefix="slipway-bench-"), "SLIPWAY_SECRET_KEY": "bench", **external}
        app = create_app(load_settings(env))
        with app.app_context():
            upgrade()
        client = app.test_client()
        auth = signed_in(client)  # the first person, an owner
        with app.app_context():
            # The people the filters name exist (the filters resolve names to ids), and own and open their rows.
            named = {number: users.create_user(f"user{number}", f"user{number}@example.com", PASSWORD, []).id
                     for number in (7, 42)}  # fmt: skip
            began = time.perf_counter()
            seed(args.rows, named)
            print(f"{args.rows:,} rows inserted in {time.perf_counter() - began:.0f} s")
        figures = time_calls(client, auth, args.requests, args.warmup)
    print(f"{'call (q)':28} | p50 ms | p99 ms")
    for label, (p50, p99) in figures.items():
        print(f"{label:28} | {p50:6.1f} | {p99:6.1f}")
    print(f"slowest p99: {max(p99 for _, p99 in figures.values()):.1f} ms (target <= 100 ms)")


if __name__ == "__main__":
    main()
