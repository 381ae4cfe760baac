"""Issue 38 benchmark: what auditing costs, on PostgreSQL, in process (routing, SQL, rendering; no network).

1. Write paths with and without the audit write (the session hook uninstalled for the baseline), interleaved in
   rounds so that both see the same machine: create a workspace, push a template version, update a template's
   settings. p50/p99 each; target overhead <= 10 %.
2. 1,000,000 entries (a real chain, COPY'd in): p99 of GET /api/v2/audit?q=... for every filter, a deep page, and
   the Audit page; target <= 100 ms.
3. Verifying the 1,000,000-entry chain (what `slipway audit verify` asks the server for); target <= 30 s.

    .venv/bin/python bench/audit.py [--writes 200] [--rounds 20] [--entries 1000000 (0: writes only)] [--requests 100]
"""

from __future__ import annotations

import argparse
import io
import random
import statistics
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from flask import Flask
from flask.testing import FlaskClient
from flask_migrate import upgrade
from sqlalchemy import event, text
from sqlalchemy.orm import Session

from app.audit import recorder
from app.audit.chain import canonical_diff, entry_hash
from app.audit.query import DEFAULT_LIMIT, filtered, parse_filter
from app.core.config import load_settings
from app.core.extensions import db
from app.factory import create_app
from app.users import services
from app.users.tokens import issue_session_token
from bench._harness import percentile, postgres_and_redis
from bench.scale import psycopg_connection
from tests.conftest import PASSWORD, Persona
from tests.support.archives import tar_of
from tests.support.daemon import FakeDaemon, import_template
from tests.support.queries import counted

RESOURCE_TYPES = ("workspace", "workspace_build", "template", "template_version", "user", "api_key", "group")
ACTIONS = ("create", "write", "delete", "start", "stop", "login")
REASONS = ("initiator", "autostart", "autostop")


def people(app: Flask) -> dict[str, Persona]:
    found = {}
    with app.app_context():
        for name, roles in {"alice": ["owner"], "bob": ["template-admin"], "carol": [], "dave": []}.items():
            user = services.create_user(name, f"{name}@example.com", PASSWORD, roles)
            found[name] = Persona(user.id, name, user.email, PASSWORD, issue_session_token(user, 86_400))
    return found


def auditing(on: bool) -> None:
    installed = event.contains(Session, "after_flush", recorder._after_flush)
    if on and not installed:
        recorder.init_app()
    elif not on and installed:
        event.remove(Session, "after_flush", recorder._after_flush)
        event.remove(Session, "do_orm_execute", recorder._on_orm_execute)


def timed(call: Any) -> float:
    began = time.perf_counter()
    response = call()
    elapsed = (time.perf_counter() - began) * 1000
    assert response.status_code < 300, (response.status_code, response.get_data(as_text=True)[:300])
    return elapsed


def write_paths(app: Flask, who: dict[str, Persona], writes: int, rounds: int) -> None:
    api = app.test_client()
    daemon = FakeDaemon(api)
    template = import_template(api, who, daemon)
    bob, carol = who["bob"].auth, who["carol"].auth
    archive = tar_of({"main.tf": 'resource "terraform_data" "home" {}\n'})
    file_id = api.post("/api/v2/files", data=archive, headers={**bob, "Content-Type": "application/x-tar"}).json["id"]
    counter = iter(range(10**9))
    paths = {
        "create workspace": lambda: api.post(
            "/api/v2/workspaces", headers=carol,
            json={"template_id": template["id"], "name": f"w{next(counter)}",
                  "rich_parameter_values": [{"name": "region", "value": "eu"}]},
        ),
        "push version": lambda: api.post(
            "/api/v2/templateversions", json={"file_id": file_id, "template_id": template["id"]}, headers=bob
        ),
        "update settings": lambda: api.patch(
            f"/api/v2/templates/{template['id']}", json={"default_ttl_ms": 3_600_000 + next(counter)}, headers=bob
        ),
    }  # fmt: skip
    samples: dict[tuple[str, bool], list[float]] = {(name, on): [] for name in paths for on in (True, False)}
    # Each round's overhead is the ratio of its own medians with and without (both taken within seconds of each
    # other, the order alternating): a burst of other engineers' tests moves both sides of one round together,
    # and the median of the rounds' ratios is the steady figure. p99s are over all rounds' samples.
    ratios: dict[str, list[float]] = {name: [] for name in paths}
    for call in paths.values():  # warm up
        for on in (True, False):
            auditing(on)
            timed(call)
    per_round = max(1, writes // rounds)
    for number in range(rounds):
        mine: dict[tuple[str, bool], list[float]] = {}
        for on in (True, False) if number % 2 == 0 else (False, True):
            auditing(on)
            for name, call in paths.items():
                mine[(name, on)] = [timed(call) for _ in range(per_round)]
                samples[(name, on)] += mine[(name, on)]
        for name in paths:
            ratios[name].append(percentile(mine[(name, True)], 0.5) / percentile(mine[(name, False)], 0.5))
    statements = {}
    for on in (True, False):
        auditing(on)
        for name, call in paths.items():
            with counted(app) as seen:
                timed(call)
            statements[(name, on)] = len(seen)
    auditing(True)
    print(f"write paths, {per_round * rounds} of each with and without auditing, interleaved in {rounds} rounds:")
    for name in paths:
        on, off = samples[(name, True)], samples[(name, False)]
        p50_on, p50_off = percentile(on, 0.5), percentile(off, 0.5)
        p99_on, p99_off = percentile(on, 0.99), percentile(off, 0.99)
        print(
            f"  {name:17} with: p50 {p50_on:6.1f} ms p99 {p99_on:6.1f} ms | without: p50 {p50_off:6.1f} ms "
            f"p99 {p99_off:6.1f} ms | overhead: median of rounds' p50 ratios "
            f"{100 * (statistics.median(ratios[name]) - 1):+.1f} %, pooled p50 {100 * (p50_on / p50_off - 1):+.1f} %"
            f", pooled p99 {100 * (p99_on / p99_off - 1):+.1f} % | SQL statements {statements[(name, True)]} vs "
            f"{statements[(name, False)]}"
        )


def seed_entries(cluster: Any, database: str, app: Flask, count: int) -> dict[str, str]:
    """``count`` entries chained onto what the write paths left, over the past year, COPY'd in."""
    with app.app_context():
        head = db.session.execute(text("SELECT last_seq, last_hash FROM audit_chain_head WHERE id = 1")).one()
    seq, prev = int(head.last_seq), str(head.last_hash)
    start = datetime.now(UTC) - timedelta(days=365)
    step = timedelta(days=364) / count
    users = [f"user{number}" for number in range(200)]
    sample_ids: dict[str, str] = {}
    buffer = io.StringIO()
    rng = random.Random(38)
    for number in range(count):
        seq += 1
        resource_type, action = rng.choice(RESOURCE_TYPES), rng.choice(ACTIONS)
        resource_id = str(uuid.UUID(int=rng.getrandbits(128)))
        reason = rng.choice(REASONS) if resource_type == "workspace_build" else None
        user_id = str(uuid.UUID(int=number % 200 + 1))
        username = users[number % 200]
        diff = canonical_diff({"name": {"old": None, "new": f"r{number}", "secret": False}})
        moment = start + step * number
        digest = entry_hash(seq, moment, "user", user_id, username, "10.0.0.1", "bench/1.0", resource_type,
                            resource_id, f"r{number}", action, reason, 200, diff, prev)  # fmt: skip
        if number == count // 2:
            sample_ids["resource_id"] = resource_id
        escaped = diff.replace("\\", "\\\\")
        row = (str(seq), moment.isoformat(), "user", user_id, username, "10.0.0.1", "bench/1.0", resource_type,
               resource_id, f"r{number}", action, reason or "\\N", "200", escaped, prev, digest)  # fmt: skip
        buffer.write("\t".join(row) + "\n")
        prev = digest
    columns = ("id, time, actor_kind, user_id, username, ip, user_agent, resource_type, resource_id, resource_name, "
               "action, build_reason, status_code, diff, prev_hash, hash")  # fmt: skip
    with psycopg_connection(cluster, database) as connection:
        with connection.cursor() as cursor, cursor.copy(f"COPY audit_logs ({columns}) FROM STDIN") as copy:
            copy.write(buffer.getvalue())
        connection.execute("UPDATE audit_chain_head SET last_seq = %s, last_hash = %s WHERE id = 1", (seq, prev))
        connection.execute("ANALYZE audit_logs")
    return sample_ids


def reads(app: Flask, who: dict[str, Persona], sample: dict[str, str], requests: int) -> None:
    api: FlaskClient = app.test_client()
    alice = who["alice"].auth
    middle = (datetime.now(UTC) - timedelta(days=180)).date()
    queries = {
        "no filter": "",
        "resource_type:workspace_build": "resource_type:workspace_build",
        "action:delete": "action:delete",
        "username:user17": "username:user17",
        "resource_id:<one of 1M>": f"resource_id:{sample['resource_id']}",
        "build_reason:autostart": "build_reason:autostart",
        "date_from..date_to (a week)": f"date_from:{middle} date_to:{middle + timedelta(days=7)}",
        "resource_type + username + action": "resource_type:workspace username:user17 action:create",
    }
    print(f"GET /api/v2/audit with {count_entries(app):,} entries, {requests} requests each (25 per page):")
    for label, q in queries.items():
        samples = [timed(lambda q=q: api.get(f"/api/v2/audit?q={q}", headers=alice)) for _ in range(requests)]
        print(f"{figures(label, samples)}  (SQL alone: {sql_ms(app, q):.2f} ms, EXPLAIN ANALYZE)")
    deep = [timed(lambda: api.get("/api/v2/audit?before=500000&q=username:user17", headers=alice))
            for _ in range(requests)]  # fmt: skip
    print(figures("a deep page (before=500000)", deep))
    browser = app.test_client()
    token = browser.get("/login").get_data(as_text=True).split('name="csrf_token" value="')[1].split('"')[0]
    browser.post("/login", data={"email": "alice@example.com", "password": PASSWORD, "csrf_token": token})
    page = [timed(lambda: browser.get("/audit?q=resource_type:workspace_build")) for _ in range(requests)]
    print(figures("the Audit page (50 rows, filtered)", page))


def sql_ms(app: Flask, q: str) -> float:
    """The page query's own execution time as PostgreSQL reports it (what the machine's load adds to the rest)."""
    with app.app_context():
        query = filtered(parse_filter(q)).limit(DEFAULT_LIMIT + 1)
        statement = query.compile(db.engine, compile_kwargs={"literal_binds": True})
        lines = [str(row[0]) for row in db.session.execute(text(f"EXPLAIN ANALYZE {statement}"))]
        db.session.rollback()
    return float(next(line for line in lines if line.startswith("Execution Time")).split()[2])


def figures(label: str, samples: list[float]) -> str:
    return f"  {label:36} p50 {percentile(samples, 0.5):6.1f} ms  p99 {percentile(samples, 0.99):6.1f} ms"


def count_entries(app: Flask) -> int:
    with app.app_context():
        return int(db.session.scalar(text("SELECT count(*) FROM audit_logs")) or 0)


def verification(app: Flask, who: dict[str, Persona]) -> None:
    api = app.test_client()
    began = time.perf_counter()
    answer = api.get("/api/v2/audit/verify", headers=who["alice"].auth).json
    elapsed = time.perf_counter() - began
    assert answer["ok"], answer
    print(f"verify (GET /api/v2/audit/verify, what `slipway audit verify` runs): {answer['checked']:,} entries in "
          f"{elapsed:.1f} s (target <= 30 s)")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--writes", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--entries", type=int, default=1_000_000)
    parser.add_argument("--requests", type=int, default=100)
    args = parser.parse_args()
    with postgres_and_redis("audit") as (cluster, external):
        env = {"SLIPWAY_DATA_DIR": tempfile.mkdtemp(prefix="slipway-bench-"), "SLIPWAY_SECRET_KEY": "bench",
               "SLIPWAY_PROVISIONER_DAEMON_PSK": "test-daemon-psk", **external}  # fmt: skip
        app = create_app(load_settings(env))
        with app.app_context():
            upgrade()
        who = people(app)
        write_paths(app, who, args.writes, args.rounds)
        if not args.entries:  # the write paths alone
            return
        sample = seed_entries(cluster, "audit", app, args.entries)
        reads(app, who, sample, args.requests)
        verification(app, who)
        with app.app_context():
            db.engine.dispose()


if __name__ == "__main__":
    main()
