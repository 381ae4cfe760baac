"""Issue 37 benchmark: who may use which template, at scale, on PostgreSQL. 2,000 users, 200 groups (about 100
members each), 200 templates each with a 20-entry access list (10 groups, 10 people; Everyone taken off), and 10,000
workspaces (the rows of bench/scale.py). The member is in 20 groups.

As the member: p50/p99 of the server's time (in process: routing, SQL, rendering) over --requests calls, after
--warmup untimed ones, for the templates list, the workspaces list and a workspace page (API and dashboard), and
the SQL statements each runs, both measured twice: with Everyone as every template's only entry and the member in
no group, then with the access lists and groups above. The two counts must be equal (target p99 <= 100 ms).

    .venv/bin/python bench/permissions.py [--requests 200] [--warmup 10] [--workspaces 10000]
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from flask.testing import FlaskClient
from flask_migrate import upgrade
from sqlalchemy import delete, insert, select

from app.catalog.models import TemplateAcl
from app.core.config import load_settings
from app.core.extensions import db
from app.factory import create_app
from app.groups.models import Group, GroupMember
from app.organizations.models import DEFAULT_ORGANIZATION_ID
from app.workspaces.models import Workspace
from bench import scale
from bench._harness import percentile, postgres_and_redis
from bench.pages import signed_in
from bench.scale import NOW, Deployment, psycopg_connection
from tests.support.queries import counted

USERS, GROUPS, TEMPLATES = 2000, 200, 200
MEMBERS_PER_GROUP, MEMBER_GROUPS = 100, 20
GROUP_ENTRIES, USER_ENTRIES = 10, 10
# Build logs are not what these pages read (bar a failed build's cause): a few lines a job keep the seeding short.
scale.LINES_PER_JOB = 5
# The member may use one template in four (through one of their groups); their own workspaces' templates included.
USABLE_EVERY = 4


def endpoints(deployment: Deployment) -> dict[str, str]:
    with deployment.app.app_context():
        workspace_id = db.session.scalars(
            select(Workspace.id).where(Workspace.owner_id == deployment.member_id).order_by(Workspace.name_key)
        ).first()
    return {
        "API templates": "/api/v2/templates",
        "page /templates": "/templates",
        "API workspaces (first 100)": "/api/v2/workspaces",
        "page /workspaces": "/workspaces",
        "API a workspace": f"/api/v2/workspaces/{workspace_id}",
        "page a workspace": f"/workspaces/{workspace_id}",
    }


def restrict(deployment: Deployment) -> int:
    """Groups, memberships and 20-entry access lists; returns how many templates the member may use."""
    rng = random.Random(37)
    began = time.perf_counter()
    with deployment.app.app_context():
        groups = [{"id": str(uuid.uuid4()), "organization_id": DEFAULT_ORGANIZATION_ID, "name": f"group{n}",
                   "display_name": "", "avatar_url": "", "quota_allowance": 0, "source": "user",
                   "created_at": NOW, "updated_at": NOW} for n in range(GROUPS)]  # fmt: skip
        db.session.execute(insert(Group), groups)
        group_ids = [group["id"] for group in groups]
        mine = group_ids[:MEMBER_GROUPS]
        others = group_ids[MEMBER_GROUPS:]
        members = []
        for group_id in group_ids:
            people = rng.sample(deployment.other_ids, MEMBERS_PER_GROUP - (1 if group_id in mine else 0))
            members += [{"group_id": group_id, "user_id": user_id, "created_at": NOW} for user_id in people]
            if group_id in mine:
                members.append({"group_id": group_id, "user_id": deployment.member_id, "created_at": NOW})
        db.session.execute(insert(GroupMember), members)
        db.session.execute(delete(TemplateAcl))
        entries, usable = [], 0
        for number, (template_id, _) in enumerate(deployment.templates):
            chosen = rng.sample(others, GROUP_ENTRIES)
            if number % USABLE_EVERY == 0:  # one of the member's groups is among them
                chosen[0] = mine[number % MEMBER_GROUPS]
                usable += 1
            people = rng.sample(deployment.other_ids, USER_ENTRIES)
            entries += [{"id": str(uuid.uuid4()), "template_id": template_id, "group_id": group_id, "user_id": None,
                         "role": "use", "created_at": NOW} for group_id in chosen]  # fmt: skip
            entries += [{"id": str(uuid.uuid4()), "template_id": template_id, "group_id": None, "user_id": user_id,
                         "role": "admin" if i == 0 else "use", "created_at": NOW}
                        for i, user_id in enumerate(people)]  # fmt: skip
        db.session.execute(insert(TemplateAcl), entries)
        db.session.commit()
    with psycopg_connection(deployment.cluster, deployment.database) as connection:
        connection.execute("ANALYZE")
    print(f"  {GROUPS} groups, {len(members):,} memberships, {len(entries):,} access-list entries in "
          f"{time.perf_counter() - began:.0f} s; the member may use {usable} of {TEMPLATES} templates")  # fmt: skip
    return usable


def count_statements(deployment: Deployment, paths: dict[str, str], page: FlaskClient) -> dict[str, int]:
    api = deployment.app.test_client()
    counts = {}
    for label, path in paths.items():
        client, headers = (api, deployment.member_auth) if path.startswith("/api/") else (page, {})
        client.get(path, headers=headers)
        for _ in range(2):  # the fewer of two: a periodic write (a session's "last seen") is not the page's cost
            with counted(deployment.app) as statements:
                reply = client.get(path, headers=headers)
            assert reply.status_code == 200, (label, reply.status_code)
            counts[label] = min(counts.get(label, len(statements)), len(statements))
    return counts


def time_requests(
    deployment: Deployment, paths: dict[str, str], page: FlaskClient, requests: int, warmup: int
) -> dict[str, tuple[float, float, int]]:
    """Label → (p50 ms, p99 ms, rows listed or bytes)."""
    api = deployment.app.test_client()
    figures = {}
    for label, path in paths.items():
        client, headers = (api, deployment.member_auth) if path.startswith("/api/") else (page, {})
        for _ in range(warmup):
            assert client.get(path, headers=headers).status_code == 200, label
        samples, size = [], 0
        for _ in range(requests):
            began = time.perf_counter()
            reply = client.get(path, headers=headers)
            samples.append((time.perf_counter() - began) * 1000)
            assert reply.status_code == 200, (label, reply.status_code)
            size = len(reply.json) if isinstance(reply.json, list) else len(reply.data)
        figures[label] = (percentile(samples, 0.5), percentile(samples, 0.99), size)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=200, help="timed calls per request")
    parser.add_argument("--warmup", type=int, default=10, help="untimed calls of each before them")
    parser.add_argument("--workspaces", type=int, default=10000, help="how many workspaces to seed")
    args = parser.parse_args()

    with postgres_and_redis("permissions") as (cluster, external):
        env = {"SLIPWAY_DATA_DIR": tempfile.mkdtemp(prefix="slipway-bench-"), "SLIPWAY_SECRET_KEY": "bench", **external}
        app = create_app(load_settings(env))
        with app.app_context():
            upgrade()
        deployment = Deployment(app, cluster, "permissions", users=USERS, templates=TEMPLATES)
        deployment.grow_to(args.workspaces)
        paths = endpoints(deployment)
        page = signed_in(deployment, "member")
        open_counts = count_statements(deployment, paths, page)
        open_timings = time_requests(deployment, paths, page, args.requests, args.warmup)
        usable = restrict(deployment)
        listed = deployment.app.test_client().get("/api/v2/templates?limit=1000", headers=deployment.member_auth)
        assert len(listed.json) == usable, (len(listed.json), usable)
        restricted_counts = count_statements(deployment, paths, page)
        timings = time_requests(deployment, paths, page, args.requests, args.warmup)
    report(open_counts, restricted_counts, open_timings, timings)


Timings = dict[str, tuple[float, float, int]]


def report(open_counts: dict[str, int], restricted: dict[str, int], open_timings: Timings, timings: Timings) -> None:
    """Each request with Everyone only (statements, p50, p99), then with the access lists and groups."""
    columns = "Everyone only: stmts  p50 ms  p99 ms | 20-entry ACLs: stmts  p50 ms  p99 ms | size"
    header = f"{'as the member (in 20 groups)':28} | {columns}"
    print(header)
    print("-" * len(header))
    worst = 0.0
    for label, (p50, p99, size) in timings.items():
        worst = max(worst, p99)
        before = f"{open_counts[label]:20}  {open_timings[label][0]:6.1f}  {open_timings[label][1]:6.1f}"
        print(f"{label:28} | {before} | {restricted[label]:20}  {p50:6.1f}  {p99:6.1f} | {size}")
    same = all(open_counts[label] == restricted[label] for label in timings)
    print(f"slowest p99: {worst:.1f} ms (target <= 100 ms); statement counts unchanged by groups and entries: {same}")


if __name__ == "__main__":
    main()
