"""Issue 19 benchmark: the dashboard's main pages, server-side, with 10,000 workspaces, 200 templates and 2,000 users
on PostgreSQL (the rows of bench/scale.py: ten builds per workspace, 50 log lines per job, 100 daemons).

For each page, as the owner and as a member: p50/p99 of the server's time over --requests calls (in process, so
that only the server's work is timed: routing, SQL, rendering), after --warmup untimed calls, and the HTML's size.
Measured at 1,000 and at 10,000 workspaces: a page's time must follow its page size, not the number of rows
(target p99 <= 100 ms at both sizes, and the growth column near 1).

Deep pages (issue 43): page 40 of the workspaces, jobs and users lists two ways, as a bookmark of ``?page=40``
(read by offset) and as the Next link of page 39 names it (``?page=40&after=<id>``, read by key from that row), each
against page 1 of the same list in the same run (target: page 40 by key within 1.1x of page 1 at 10,000 rows).
Users grow with the workspaces here (to 10,000), so that their deep page is measured at that size too.

    .venv/bin/python bench/pages.py [--requests 100] [--warmup 5] [--sizes 1000,10000]
"""

from __future__ import annotations

import argparse
import html
import re
import sys
import tempfile
import time
import uuid
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from flask.testing import FlaskClient
from flask_migrate import upgrade
from sqlalchemy import func, insert, select

from app.catalog.models import Template
from app.core.config import load_settings
from app.core.extensions import db
from app.factory import create_app
from app.organizations.models import DEFAULT_ORGANIZATION_ID, OrganizationMember
from app.provisioning.models import ProvisionerJob
from app.users.models import User
from app.workspaces.models import Workspace, WorkspaceBuild
from bench._harness import percentile, postgres_and_redis
from bench.scale import NOW, PASSWORD, Deployment, psycopg_connection
from protocol.provisionerd import JOB_WORKSPACE_BUILD

USERS, TEMPLATES = 2000, 200
CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


def signed_in(deployment: Deployment, who: str) -> FlaskClient:
    client = deployment.app.test_client()
    token = CSRF.search(client.get("/login").get_data(as_text=True))
    assert token, "no CSRF token on the sign-in page"
    form = {"email": f"{who}@example.com", "password": PASSWORD, "csrf_token": token.group(1)}
    assert client.post("/login", data=form).status_code == 302
    return client


def next_link(client: FlaskClient, path: str) -> str | None:
    """Where a list page's Next link goes (the page after it, named by the row it continues from); None on the
    last page."""
    found = re.search(r'rel="next" href="([^"]+)"', client.get(path).get_data(as_text=True))
    return html.unescape(found.group(1)) if found else None


DEEP_LISTS = {
    "/workspaces": "/workspaces?",
    "/workspaces?q=status:stopped": "/workspaces?q=status%3Astopped&",
    "/provisioners/jobs": "/provisioners/jobs?",
    "/users": "/users?",
}


# A workspace's builds: one of the owner's workspaces has this many, so that its timeline (the workspace page's
# builds, 25 a page) is 40 pages deep at both sizes.
LONG_HISTORY = 1100
HISTORY_LABEL = "a workspace's builds"


def add_long_history(deployment: Deployment, builds: int = LONG_HISTORY) -> str:
    """One more workspace, the owner's, with ``builds`` builds and their jobs (no logs); its id."""
    workspace_id, now = str(uuid.uuid4()), NOW
    with deployment.app.app_context():
        template_id, version_id = deployment.templates[0]
        build_ids, jobs, rows = [str(uuid.uuid4()) for _ in range(builds)], [], []
        for number, build_id in enumerate(build_ids, start=1):
            job_id, when = str(uuid.uuid4()), now - timedelta(minutes=builds - number)
            jobs.append({"id": job_id, "type": JOB_WORKSPACE_BUILD, "input": {}, "tags": {}, "queue": "bench",
                         "file_id": deployment.file_id, "initiator_id": deployment.owner_id, "created_at": when,
                         "updated_at": when, "started_at": when, "completed_at": when})  # fmt: skip
            rows.append({"id": build_id, "workspace_id": workspace_id, "build_number": number,
                         "transition": "start" if number % 2 else "stop", "template_version_id": version_id,
                         "job_id": job_id, "initiator_id": deployment.owner_id, "parameters": [],
                         "created_at": when, "reason": "initiator"})  # fmt: skip
        db.session.execute(insert(ProvisionerJob), jobs)
        db.session.execute(insert(Workspace), [{"id": workspace_id, "name": "history", "name_key": "history",
                                                "owner_id": deployment.owner_id, "template_id": template_id,
                                                "created_at": now, "latest_build_id": build_ids[-1]}])  # fmt: skip
        db.session.execute(insert(WorkspaceBuild), rows)
        db.session.commit()
    with psycopg_connection(deployment.cluster, deployment.database) as connection:
        connection.execute("ANALYZE")
    return workspace_id


def time_deep_pages(
    deployment: Deployment, requests: int, warmup: int, history: str
) -> dict[str, tuple[float, float, int]]:
    """Each long list's page 1, its page 40 by offset (a bookmark) and by key (the Next link of page 39), as the
    owner: requested in turn, round after round, so that the machine's drift (it is shared) weighs on all three
    alike. ``history`` is the workspace whose builds are listed. Label → (p50 ms, p99 ms, HTML bytes)."""
    owner = signed_in(deployment, "owner")
    figures = {}
    for label, path in {**DEEP_LISTS, HISTORY_LABEL: f"/workspaces/{history}?"}.items():
        keyed = next_link(owner, f"{path}page=39")
        if keyed is None:  # fewer than 40 pages at this size (the filtered list at 1,000)
            continue
        urls = {"page 1 (deep)": path.rstrip("?&"), "page 40 by offset": f"{path}page=40", "page 40 by key": keyed}
        samples: dict[str, list[float]] = {which: [] for which in urls}
        sizes = {}
        for round_number in range(warmup + requests):
            for which, url in urls.items():
                began = time.perf_counter()
                reply = owner.get(url)
                took = (time.perf_counter() - began) * 1000
                assert reply.status_code == 200, (url, reply.status_code)
                sizes[which] = len(reply.data)
                if round_number >= warmup:
                    samples[which].append(took)
        for which in urls:
            figures[f"{label}, {which}"] = (
                percentile(samples[which], 0.5),
                percentile(samples[which], 0.99),
                sizes[which],
            )
    return figures


def grow_users_to(deployment: Deployment, total: int) -> None:
    """Bulk-added people (each in the default organisation, as one made at a time would be) up to ``total``."""
    with deployment.app.app_context():
        have = db.session.scalar(select(func.count()).select_from(User)) or 0
        people = [{"id": str(uuid.uuid4()), "username": f"person{n}", "email": f"person{n}@example.com",
                   "roles": [], "login_type": "password"} for n in range(have, total)]  # fmt: skip
        if not people:
            return
        db.session.execute(insert(User), people)
        memberships = [{"organization_id": DEFAULT_ORGANIZATION_ID, "user_id": row["id"], "roles": [],
                        "created_at": NOW, "updated_at": NOW} for row in people]  # fmt: skip
        db.session.execute(insert(OrganizationMember), memberships)
        db.session.commit()
    with psycopg_connection(deployment.cluster, deployment.database) as connection:
        connection.execute("ANALYZE")


def pages(deployment: Deployment) -> dict[str, tuple[str, str]]:
    """Label → (path, who). The member's workspace is one of their own; the owner opens the same one."""
    with deployment.app.app_context():
        workspace = db.session.scalars(
            select(Workspace).where(Workspace.owner_id == deployment.member_id).order_by(Workspace.name_key)
        ).first()
        assert workspace is not None
        build = db.session.scalars(
            select(WorkspaceBuild).where(WorkspaceBuild.workspace_id == workspace.id)
            .order_by(WorkspaceBuild.build_number.desc())
        ).first()  # fmt: skip
        assert build is not None
        template = db.session.get(Template, workspace.template_id)
        assert template is not None
        workspace_id, build_id, template_name = workspace.id, build.id, template.name
    listed = {
        "/workspaces": "/workspaces",
        "/workspaces, page 40": "/workspaces?page=40",
        "/workspaces?q=status:stopped": "/workspaces?q=status%3Astopped",
        "a workspace": f"/workspaces/{workspace_id}",
        "a build": f"/builds/{build_id}",
        "/templates": "/templates",
        "a template": f"/templates/{template_name}",
        "/account": "/account",
    }
    owner_only = {
        "/users": "/users",
        "/users, page 40": "/users?page=40",
        "/users?q=user1": "/users?q=user1",
        "/provisioners": "/provisioners",
        "/provisioners/jobs": "/provisioners/jobs",
        "/provisioners/jobs, page 40": "/provisioners/jobs?page=40",
        "/health": "/health",
    }
    return {
        **{f"{label}, owner": (path, "owner") for label, path in (listed | owner_only).items()},
        **{f"{label}, member": (path, "member") for label, path in listed.items()},
    }


def time_pages(deployment: Deployment, requests: int, warmup: int) -> dict[str, tuple[float, float, int]]:
    """Label → (p50 ms, p99 ms, HTML bytes)."""
    clients = {who: signed_in(deployment, who) for who in ("owner", "member")}
    figures = {}
    for label, (path, who) in pages(deployment).items():
        client = clients[who]
        for _ in range(warmup):
            assert client.get(path).status_code == 200, label
        samples, size = [], 0
        for _ in range(requests):
            began = time.perf_counter()
            reply = client.get(path)
            samples.append((time.perf_counter() - began) * 1000)
            assert reply.status_code == 200, (label, reply.status_code)
            size = len(reply.data)
        figures[label] = (percentile(samples, 0.5), percentile(samples, 0.99), size)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=100, help="timed calls per page and size")
    parser.add_argument("--warmup", type=int, default=5, help="untimed calls of each page before them")
    parser.add_argument("--sizes", default="1000,10000", help="workspace counts to measure at, ascending")
    parser.add_argument("--deep-only", action="store_true", help="only the deep-page rows (page 1 against page 40)")
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]

    with postgres_and_redis("pages") as (cluster, external):
        env = {"SLIPWAY_DATA_DIR": tempfile.mkdtemp(prefix="slipway-bench-"), "SLIPWAY_SECRET_KEY": "bench", **external}
        app = create_app(load_settings(env))
        with app.app_context():
            upgrade()
        deployment = Deployment(app, cluster, "pages", users=USERS, templates=TEMPLATES)
        history = add_long_history(deployment)
        timings = {}
        for size in sizes:
            deployment.grow_to(size)
            grow_users_to(deployment, size)
            shallow = {} if args.deep_only else time_pages(deployment, args.requests, args.warmup)
            timings[size] = shallow | time_deep_pages(deployment, args.requests, args.warmup, history)
    if not args.deep_only:
        report(sizes, timings)
    report_deep(sizes, timings)


def report(sizes: list[int], timings: dict[int, dict[str, tuple[float, float, int]]]) -> None:
    header = f"{'page':36}" + "".join(f" | {size:>6,} ws: p50 ms  p99 ms    KiB" for size in sizes) + " | growth"
    print(header)
    print("-" * len(header))
    worst = 0.0
    for label in timings[sizes[0]]:
        if "(deep)" in label or "page 40 by" in label:
            continue  # in report_deep, against page 1 of the same size
        row = f"{label:36}"
        for size in sizes:
            p50, p99, size_bytes = timings[size][label]
            worst = max(worst, p99)
            row += f" | {'':10}{p50:6.1f}  {p99:6.1f}  {size_bytes / 1024:5.1f}"
        growth = timings[sizes[-1]][label][0] / max(timings[sizes[0]][label][0], 0.001)
        print(f"{row} | {growth:5.2f}x")
    print(f"slowest p99: {worst:.1f} ms (target <= 100 ms); growth = p50 at {sizes[-1]:,} / p50 at {sizes[0]:,}")


def report_deep(sizes: list[int], timings: dict[int, dict[str, tuple[float, float, int]]]) -> None:
    """Page 40 against page 1 of the same list, by offset and by key (p50s of the same run)."""
    header = f"{'deep pages (p50 ms)':32}" + "".join(
        f" | {size:>6,}: page 1  p40 offset  p40 key  key/p1" for size in sizes
    )
    print()
    print(header)
    print("-" * len(header))
    for label in [*DEEP_LISTS, HISTORY_LABEL]:
        row = f"{label:32}"
        for size in sizes:
            if f"{label}, page 1 (deep)" not in timings[size]:
                row += f" | {'(fewer than 40 pages)':>42}"
                continue
            first, offset, key = (timings[size][f"{label}, {which}"][0] for which in
                                  ("page 1 (deep)", "page 40 by offset", "page 40 by key"))  # fmt: skip
            row += f" | {'':7}{first:6.1f}  {offset:10.1f}  {key:7.1f}  {key / max(first, 0.001):5.2f}x"
        print(row)
    print("target: page 40 by key within 1.10x of page 1 at the largest size")


if __name__ == "__main__":
    main()
