"""Lists and pages at scale, on PostgreSQL: 1,000 then 10,000 workspaces (500 users, 20 templates), ten builds each
(10,000 then 100,000 jobs), 50 log lines per job (0.5 M then 5 M), 100 daemons and 100 pending jobs.

For every list endpoint and page, as the owner and as a member, prints
- the SQL statements one request runs at each size (counted in process; they must not grow with the data),
- p50/p99 over --requests calls to a real `slipway server` with two web workers (targets: p99 ≤ 100 ms), after
  --warmup untimed calls of each (the first calls of a page on each worker compile its template and its SQL: a
  one-off, not a percentile; and p99 needs enough calls to be more than the slowest one),
- the web workers' memory afterwards (target ≤ 300 MB each).

    .venv/bin/python bench/scale.py [--requests 200] [--warmup 10] [--sizes 1000,10000]
"""

from __future__ import annotations

import argparse
import io
import random
import re
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx
import psutil
from flask import Flask
from flask.testing import FlaskClient
from flask_migrate import upgrade
from sqlalchemy import insert

from app.catalog.models import Template, TemplateAcl, TemplateVersion
from app.core.config import load_settings
from app.core.extensions import db
from app.factory import create_app
from app.files.models import File
from app.organizations.models import DEFAULT_ORGANIZATION_ID, OrganizationMember
from app.provisioning.models import ProvisionerDaemon, ProvisionerJob
from app.users.models import User
from app.workspaces.models import Workspace, WorkspaceBuild
from bench._harness import Server, percentile, postgres_and_redis
from protocol.provisionerd import JOB_TEMPLATE_IMPORT, JOB_WORKSPACE_BUILD
from tests.support.postgres import PostgresCluster
from tests.support.queries import counted

PASSWORD = "correct-horse-battery"
USERS, TEMPLATES, BUILDS_PER_WORKSPACE, LINES_PER_JOB, DAEMONS, PENDING = 500, 20, 10, 50, 100, 100
LONG_LOG_LINES = 10_000
FAILURE_LINE = "Error: local-exec provisioner error (with terraform_data.line[{}],)"
NOW = datetime.now(UTC)
CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


class Deployment:
    """The rows, inserted in bulk (logs with COPY); the owner and one member are real accounts with passwords."""

    def __init__(
        self, app: Flask, cluster: PostgresCluster, database: str, *, users: int = USERS, templates: int = TEMPLATES
    ) -> None:
        self.app, self.cluster, self.database = app, cluster, database
        self.workspaces = 0
        client = app.test_client()
        first = {"username": "owner", "email": "owner@example.com", "password": PASSWORD}
        assert client.post("/api/v2/users/first", json=first).status_code == 201
        owner_token = client.post("/api/v2/users/login", json={"email": first["email"], "password": PASSWORD}).json
        self.owner_auth = {"Authorization": f"Bearer {owner_token['session_token']}"}
        member = {"username": "member", "email": "member@example.com", "password": PASSWORD, "roles": []}
        assert client.post("/api/v2/users", json=member, headers=self.owner_auth).status_code == 201
        member_token = client.post("/api/v2/users/login", json={"email": member["email"], "password": PASSWORD}).json
        self.member_auth = {"Authorization": f"Bearer {member_token['session_token']}"}
        with app.app_context():
            owner = db.session.query(User).filter_by(username="owner").one()
            self.member_id = db.session.query(User).filter_by(username="member").one().id
            self.owner_id = owner.id
            others = [{"id": str(uuid.uuid4()), "username": f"user{n}", "email": f"user{n}@example.com",
                       "roles": [], "login_type": "password"} for n in range(users - 2)]  # fmt: skip
            db.session.execute(insert(User), others)
            # A bulk insert skips the ORM's events: each person joins the default organisation here, as a user
            # made one at a time does (app/users/models.py).
            memberships = [{"organization_id": DEFAULT_ORGANIZATION_ID, "user_id": row["id"], "roles": [],
                            "created_at": NOW, "updated_at": NOW} for row in others]  # fmt: skip
            db.session.execute(insert(OrganizationMember), memberships)
            self.other_ids = [row["id"] for row in others]
            file = File(sha256="0" * 64, mimetype="application/x-tar", size=5, data=b"bench", created_by=owner.id)
            db.session.add(file)
            db.session.flush()
            self.file_id = file.id
            self.templates: list[tuple[str, str]] = []
            for number in range(templates):
                job = ProvisionerJob(type=JOB_TEMPLATE_IMPORT, queue="bench", file_id=file.id, initiator_id=owner.id,
                                     started_at=NOW, completed_at=NOW)  # fmt: skip
                db.session.add(job)
                db.session.flush()
                version = TemplateVersion(name=f"v{number}", job_id=job.id, created_by=owner.id)
                db.session.add(version)
                db.session.flush()
                template = Template(name=f"template{number}", active_version_id=version.id, created_by=owner.id)
                db.session.add(template)
                db.session.flush()
                version.template_id = template.id
                # As every new template: Everyone may use it.
                db.session.add(TemplateAcl(template_id=template.id, group_id=DEFAULT_ORGANIZATION_ID, role="use"))
                self.templates.append((template.id, version.id))
            daemons = [{"id": str(uuid.uuid4()), "name": f"daemon{n}", "auth": "psk", "tags": {"region": f"r{n % 5}"},
                        "last_seen_at": NOW if n % 2 else NOW - timedelta(days=1)} for n in range(DAEMONS)]  # fmt: skip
            db.session.execute(insert(ProvisionerDaemon), daemons)
            db.session.commit()

    def grow_to(self, total: int) -> None:
        """Add workspaces until there are ``total``, each with its builds, jobs and log lines."""
        began = time.perf_counter()
        lines = 0
        with self.app.app_context():
            while self.workspaces < total:
                count = min(1000, total - self.workspaces)
                jobs, workspaces, builds, job_ids, failed_ids = [], [], [], [], []
                for number in range(self.workspaces, self.workspaces + count):
                    workspace_id = str(uuid.uuid4())
                    # The member owns every 50th workspace (20 at 1,000; 200 at 10,000) and no other, so that what
                    # their list shows (none failed, two pending) is alike at both sizes; the rest spread out.
                    owner = self.member_id if number % 50 == 0 else random.choice(self.other_ids)
                    template_id, version_id = self.templates[number % len(self.templates)]
                    build_ids = [str(uuid.uuid4()) for _ in range(BUILDS_PER_WORKSPACE)]
                    workspaces.append({"id": workspace_id, "name": f"ws{number}", "name_key": f"ws{number}",
                                       "owner_id": owner, "template_id": template_id, "created_at": NOW,
                                       "latest_build_id": build_ids[-1]})  # fmt: skip
                    for build_number in range(1, BUILDS_PER_WORKSPACE + 1):
                        job_id = str(uuid.uuid4())
                        latest = build_number == BUILDS_PER_WORKSPACE
                        pending = latest and number < PENDING and self.workspaces == 0
                        # One workspace in 20 failed its latest build: lists show its cause, read from its log.
                        failed = latest and not pending and number % 20 == 1
                        when = NOW - timedelta(hours=BUILDS_PER_WORKSPACE - build_number)
                        jobs.append({
                            "id": job_id, "type": JOB_WORKSPACE_BUILD, "input": {}, "tags": {}, "queue": "bench",
                            "file_id": self.file_id, "initiator_id": owner, "created_at": when, "updated_at": when,
                            "started_at": None if pending else when, "completed_at": None if pending else when,
                            "error": "terraform apply failed" if failed else None,
                        })  # fmt: skip
                        if failed:
                            failed_ids.append(job_id)
                        builds.append({
                            "id": build_ids[build_number - 1], "workspace_id": workspace_id,
                            "build_number": build_number,
                            "transition": "start" if build_number % 2 else "stop", "template_version_id": version_id,
                            "job_id": job_id, "initiator_id": owner, "parameters": [], "created_at": when,
                            "reason": "initiator",
                        })  # fmt: skip
                        job_ids.append(job_id)
                db.session.execute(insert(ProvisionerJob), jobs)
                db.session.execute(insert(Workspace), workspaces)
                db.session.execute(insert(WorkspaceBuild), builds)
                db.session.commit()
                lines += self._copy_logs(job_ids, LINES_PER_JOB)
                lines += self._copy_logs(failed_ids, 1, level="error", output=FAILURE_LINE)
                self.workspaces += count
            if not hasattr(self, "long_build_id"):  # one build with a long log: a page of it is a log read's cost
                build = db.session.query(WorkspaceBuild).filter_by(build_number=1).first()
                assert build is not None
                self.long_build_id = build.id
                lines += self._copy_logs([build.job_id], LONG_LOG_LINES)
        with psycopg_connection(self.cluster, self.database) as connection:
            connection.execute("ANALYZE")
        print(f"  seeded to {total:,} workspaces ({lines:,} log lines added) in {time.perf_counter() - began:.0f} s")

    def _copy_logs(
        self,
        job_ids: list[str],
        per_job: int,
        *,
        level: str = "info",
        output: str = "terraform_data.line[{}]: Creating...",
    ) -> int:
        buffer = io.StringIO()
        stamp = NOW.isoformat()
        for job_id in job_ids:
            for line in range(per_job):
                buffer.write(f"{job_id}\t{stamp}\tprovisioner\t{level}\tApplying\t{output.format(line)}\n")
        with psycopg_connection(self.cluster, self.database) as connection, connection.cursor() as cursor:
            copy = "COPY provisioner_job_logs (job_id, created_at, source, level, stage, output) FROM STDIN"
            with cursor.copy(copy) as writer:
                writer.write(buffer.getvalue())
            connection.commit()
        return len(job_ids) * per_job


def psycopg_connection(cluster: PostgresCluster, database: str) -> Any:
    import psycopg

    return psycopg.connect(f"host=127.0.0.1 port={cluster.port} user={cluster.user} dbname={database}")


def endpoints(deployment: Deployment) -> dict[str, tuple[str, str]]:
    """Label → (path, who): "owner" or "member" (API calls with a token, pages with a session)."""
    return {
        "API workspaces, owner, a page of 25": ("/api/v2/workspaces?limit=25", "owner"),
        "API workspaces, owner (first 100)": ("/api/v2/workspaces", "owner"),
        "API workspaces, member (first 100)": ("/api/v2/workspaces", "member"),
        "page /workspaces, member": ("/workspaces", "member"),
        "page /workspaces, owner": ("/workspaces", "owner"),
        "page /provisioners": ("/provisioners", "owner"),
        "API provisionerdaemons (100)": ("/api/v2/provisionerdaemons", "owner"),
        "API provisionerjobs?status=pending": ("/api/v2/provisionerjobs?status=pending", "owner"),
        "API jobs, newest 50": ("/api/v2/provisionerjobs", "owner"),
        "API a build's log, first 1,000 lines": (
            f"/api/v2/workspacebuilds/{deployment.long_build_id}/logs?limit=1000", "owner"),
        "API users (first 100)": ("/api/v2/users", "owner"),
        "API users, a page of 25": ("/api/v2/users?limit=25&offset=100", "owner"),
        "page /users": ("/users", "owner"),
        "page /templates": ("/templates", "member"),
        "API templates": ("/api/v2/templates", "owner"),
        "API users/me, member": ("/api/v2/users/me", "member"),
    }  # fmt: skip


def count_statements(deployment: Deployment) -> dict[str, int]:
    app = deployment.app
    pages = {"owner": app.test_client(), "member": app.test_client()}
    for who, email in (("owner", "owner@example.com"), ("member", "member@example.com")):
        _sign_in_test_client(pages[who], email)
    tokens = {"owner": deployment.owner_auth, "member": deployment.member_auth}
    counts = {}
    for label, (path, who) in endpoints(deployment).items():
        api = path.startswith("/api/")
        client = app.test_client() if api else pages[who]
        headers = tokens[who] if api else {}
        client.get(path, headers=headers)  # a token's first use records when it was used
        # The fewer of two: a periodic write (a session's "last seen", the health report) is not the list's cost.
        for _ in range(2):
            with counted(app) as statements:
                reply = client.get(path, headers=headers)
            assert reply.status_code == 200, (label, reply.status_code, reply.get_data(as_text=True)[:300])
            counts[label] = min(counts.get(label, len(statements)), len(statements))
    return counts


def _sign_in_test_client(client: FlaskClient, email: str) -> None:
    token = CSRF.search(client.get("/login").get_data(as_text=True))
    assert token is not None
    reply = client.post("/login", data={"email": email, "password": PASSWORD, "csrf_token": token.group(1)})
    assert reply.status_code == 302


def time_requests(deployment: Deployment, url: str, requests: int, warmup: int) -> dict[str, tuple[float, float]]:
    tokens = {"owner": deployment.owner_auth, "member": deployment.member_auth}
    sessions = {who: _signed_in(url, f"{who}@example.com") for who in ("owner", "member")}
    figures = {}
    for label, (path, who) in endpoints(deployment).items():
        client = sessions[who]
        headers = tokens[who] if path.startswith("/api/") else {}
        for _ in range(warmup):
            assert client.get(path, headers=headers).status_code == 200, label
        samples = []
        for _ in range(requests):
            began = time.perf_counter()
            reply = client.get(path, headers=headers)
            samples.append((time.perf_counter() - began) * 1000)
            assert reply.status_code == 200, (label, reply.status_code)
        figures[label] = (percentile(samples, 0.5), percentile(samples, 0.99))
    for client in sessions.values():
        client.close()
    return figures


def _signed_in(url: str, email: str) -> httpx.Client:
    client = httpx.Client(base_url=url, timeout=300)
    token = CSRF.search(client.get("/login").text)
    assert token is not None
    reply = client.post("/login", data={"email": email, "password": PASSWORD, "csrf_token": token.group(1)})
    assert reply.status_code == 302, reply.text[:300]
    return client


def run_server(env: dict[str, str], measure: Callable[[str], None]) -> list[float]:
    """A real server (two web workers, no built-in daemons) on the seeded database; returns web workers' RSS (MB)."""
    args = ("--provisioner-daemons", "0", "--web-workers", "2", "--lifecycle-interval", "0")
    server = Server(extra_args=args, env=env).start()
    try:
        measure(server.url)
        assert server.process is not None
        tree = psutil.Process(server.process.pid).children(recursive=True)
        masters = {child.pid for child in tree if "gunicorn" in " ".join(child.cmdline())}
        return [child.memory_info().rss / 1e6 for child in tree if child.ppid() in masters]
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=200, help="timed calls per endpoint and size")
    parser.add_argument("--warmup", type=int, default=10, help="untimed calls of each endpoint before them")
    parser.add_argument("--sizes", default="1000,10000", help="workspace counts to measure at, ascending")
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]

    with postgres_and_redis("scale") as (cluster, external):
        env = {"SLIPWAY_DATA_DIR": tempfile.mkdtemp(prefix="slipway-bench-"), "SLIPWAY_SECRET_KEY": "bench", **external}
        app = create_app(load_settings(env))
        with app.app_context():
            upgrade()
        deployment = Deployment(app, cluster, "scale")
        statements: dict[int, dict[str, int]] = {}
        timings: dict[int, dict[str, tuple[float, float]]] = {}
        memory: dict[int, list[float]] = {}
        for size in sizes:
            deployment.grow_to(size)
            statements[size] = count_statements(deployment)
            server_env = {key: value for key, value in env.items() if key != "SLIPWAY_DATA_DIR"}

            def measure(url: str, size: int = size) -> None:
                timings[size] = time_requests(deployment, url, args.requests, args.warmup)

            memory[size] = run_server(server_env, measure)
        report(sizes, statements, timings, memory)


def report(
    sizes: list[int], statements: dict[int, dict[str, int]], timings: dict[int, dict[str, tuple[float, float]]],
    memory: dict[int, list[float]],
) -> None:  # fmt: skip
    labels = list(statements[sizes[0]])
    header = f"{'request':44}" + "".join(f" | {size:>6,} ws: stmts  p50 ms  p99 ms" for size in sizes)
    print(header)
    print("-" * len(header))
    for label in labels:
        row = f"{label:44}"
        for size in sizes:
            p50, p99 = timings[size][label]
            row += f" | {'':10}{statements[size][label]:5}  {p50:6.1f}  {p99:6.1f}"
        print(row)
    same = all(statements[size] == statements[sizes[0]] for size in sizes)
    print(f"statement counts equal at every size: {'yes' if same else 'NO'}")
    for size in sizes:
        print(f"web workers' RSS at {size:,} workspaces: " + ", ".join(f"{mb:.0f} MB" for mb in memory[size]))


if __name__ == "__main__":
    main()
