"""Issue 40 benchmark: many organisations on one deployment, on PostgreSQL. 20 organisations share 200 templates and
10,000 workspaces (the rows of bench/scale.py, spread over the organisations), 50 daemons registered across them.

Pickup: a daemon of the default organisation takes --jobs template imports, one at a time, in --rounds rounds that
alternate between no other organisation's job waiting and the 19 others' queues holding --other-jobs pending jobs
(added before and removed after each such round, so that neither side gets a warmer or quieter machine). A job's
pickup is the server's time (in process: routing, SQL, no network) from the moment it is queued until the daemon's
long poll (POST /provisionerd/jobs/wait) offered it and its acquire succeeded. Prints p50/p95 of both and their
ratio (target: p95 <= 100 ms, the same as one organisation alone).

Pages: as a member of one organisation, p50/p99 of the templates and workspaces lists (API and dashboard) over
--requests calls (target p99 <= 100 ms), and the rows they list (only that organisation's).

    .venv/bin/python bench/organizations.py [--jobs 50] [--other-jobs 1000] [--requests 200] [--workspaces 10000]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from flask_migrate import upgrade
from sqlalchemy import delete, insert, select, update

from app.catalog.models import Template
from app.core.config import load_settings
from app.core.extensions import db
from app.factory import create_app
from app.groups.models import Group
from app.organizations.models import DEFAULT_ORGANIZATION_ID, Organization, OrganizationMember
from app.provisioning.models import ProvisionerJob, queue_namespace
from bench import scale
from bench._harness import percentile, postgres_and_redis
from bench.pages import signed_in
from bench.permissions import time_requests
from bench.scale import NOW, Deployment, psycopg_connection
from protocol.provisionerd import JOB_TEMPLATE_IMPORT
from protocol.tags import PRIORITY_HIGH, queue_name
from tests.support.archives import tar_of

ORGANIZATIONS, DAEMONS, TEMPLATES = 20, 50, 200
PSK = "bench-organizations-psk"
PSK_HEADERS = {"Slipway-Provisioner-PSK": PSK}
ORGANIZATION_TAGS = {"scope": "organization", "owner": ""}
scale.LINES_PER_JOB = 5  # the lists read no build logs


def organize(deployment: Deployment) -> list[str]:
    """19 organisations besides the default one, each with its Everyone group; templates (and so workspaces) and
    people dealt round them. The member stays in the default organisation only. Returns the new ones' ids."""
    with deployment.app.app_context():
        rows = [{"id": str(uuid.uuid4()), "name": f"org{n}", "display_name": f"Org {n}", "description": "", "icon": "",
                 "is_default": False, "created_at": NOW, "updated_at": NOW, "group_sync": {}, "role_sync": {}}
                for n in range(1, ORGANIZATIONS)]  # fmt: skip
        db.session.execute(insert(Organization), rows)
        ids = [row["id"] for row in rows]
        db.session.execute(insert(Group), [{"id": org_id, "organization_id": org_id, "name": "Everyone",
                                            "display_name": "", "avatar_url": "", "quota_allowance": 0,
                                            "source": "user", "created_at": NOW, "updated_at": NOW}
                                           for org_id in ids])  # fmt: skip
        everyone = [DEFAULT_ORGANIZATION_ID, *ids]
        for number, (template_id, _) in enumerate(deployment.templates):
            organization_id = everyone[number % ORGANIZATIONS]
            db.session.execute(
                update(Template).where(Template.id == template_id).values(organization_id=organization_id)
            )
        memberships = [{"organization_id": ids[n % len(ids)], "user_id": user_id, "roles": [], "created_at": NOW,
                        "updated_at": NOW} for n, user_id in enumerate(deployment.other_ids)]  # fmt: skip
        db.session.execute(insert(OrganizationMember), memberships)
        db.session.commit()
    with psycopg_connection(deployment.cluster, deployment.database) as connection:
        connection.execute("ANALYZE")
    return ids


def register_daemons(deployment: Deployment, organization_ids: list[str]) -> dict[str, str]:
    """DAEMONS daemons through the API, dealt round the organisations; returns the default one's first daemon's
    credential headers."""
    client = deployment.app.test_client()
    everyone = [DEFAULT_ORGANIZATION_ID, *organization_ids]
    ours: dict[str, str] = {}
    for number in range(DAEMONS):
        body = {"name": f"d{number}", "organization": everyone[number % ORGANIZATIONS], "instance_id": f"i{number}"}
        reply = client.post("/api/v2/provisionerd/register", json=body, headers=PSK_HEADERS)
        assert reply.status_code == 201, reply.json
        if number == 0:
            ours = {**PSK_HEADERS, "Slipway-Provisioner-Daemon": reply.json["daemon_id"]}
    return ours


def queue_others(deployment: Deployment, organization_ids: list[str], count: int) -> list[str]:
    """``count`` pending imports in the other organisations' queues, as their pushes would leave them; their ids."""
    with deployment.app.app_context():
        rows = []
        for number in range(count):
            organization_id = organization_ids[number % len(organization_ids)]
            queue = queue_name(ORGANIZATION_TAGS, PRIORITY_HIGH, queue_namespace(organization_id))
            rows.append({"id": str(uuid.uuid4()), "type": JOB_TEMPLATE_IMPORT, "organization_id": organization_id,
                         "tags": ORGANIZATION_TAGS, "queue": queue, "input": {}, "priority": PRIORITY_HIGH,
                         "file_id": deployment.file_id, "initiator_id": deployment.owner_id, "created_at": NOW,
                         "updated_at": NOW})  # fmt: skip
        db.session.execute(insert(ProvisionerJob), rows)
        db.session.commit()
    return [row["id"] for row in rows]


def unqueue(deployment: Deployment, job_ids: list[str]) -> None:
    with deployment.app.app_context():
        db.session.execute(delete(ProvisionerJob).where(ProvisionerJob.id.in_(job_ids)))
        db.session.commit()


def pickups(deployment: Deployment, daemon: dict[str, str], jobs: int) -> list[float]:
    """Milliseconds from each job's queueing to its acquisition by ``daemon``, one job at a time."""
    client = deployment.app.test_client()
    archive = tar_of({"main.tf": "# nothing to build\n"})
    upload = client.post("/api/v2/files", data=archive, headers={**deployment.owner_auth,
                                                                   "Content-Type": "application/x-tar"})  # fmt: skip
    samples = []
    for _ in range(jobs):
        version = client.post("/api/v2/templateversions", json={"file_id": upload.json["id"]},
                              headers=deployment.owner_auth)  # fmt: skip
        assert version.status_code == 201, version.json
        began = time.perf_counter()
        offered = client.post("/api/v2/provisionerd/jobs/wait", json={"timeout_seconds": 5}, headers=daemon)
        assert offered.status_code == 200 and offered.json["job_id"] == version.json["job"]["id"], offered.json
        acquired = client.post(f"/api/v2/provisionerd/jobs/{offered.json['job_id']}/acquire", headers=daemon)
        assert acquired.status_code == 200, acquired.json
        samples.append((time.perf_counter() - began) * 1000)
        done = client.post(f"/api/v2/provisionerd/jobs/{offered.json['job_id']}/complete",
                           json={"template_import": {}}, headers=daemon)  # fmt: skip
        assert done.status_code == 204, done.json
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=25, help="imports the daemon takes in each round")
    parser.add_argument("--rounds", type=int, default=4, help="rounds, alternately alone and crowded")
    parser.add_argument("--other-jobs", type=int, default=1000, help="pending jobs in the other organisations")
    parser.add_argument("--requests", type=int, default=200, help="timed calls per page")
    parser.add_argument("--warmup", type=int, default=10, help="untimed calls of each page before them")
    parser.add_argument("--workspaces", type=int, default=10000, help="how many workspaces to seed")
    args = parser.parse_args()

    with postgres_and_redis("organizations") as (cluster, external):
        env = {"SLIPWAY_DATA_DIR": tempfile.mkdtemp(prefix="slipway-bench-"), "SLIPWAY_SECRET_KEY": "bench",
               "SLIPWAY_PROVISIONER_DAEMON_PSK": PSK, **external}  # fmt: skip
        app = create_app(load_settings(env))
        with app.app_context():
            upgrade()
        deployment = Deployment(app, cluster, "organizations", templates=TEMPLATES)
        deployment.grow_to(args.workspaces)
        others = organize(deployment)
        ours = register_daemons(deployment, others)
        pickups(deployment, ours, 10)  # warm-up
        alone: list[float] = []
        crowded: list[float] = []
        waiting = 0
        for round_number in range(args.rounds):
            if round_number % 2 == 0:
                alone += pickups(deployment, ours, args.jobs)
                continue
            queued = queue_others(deployment, others, args.other_jobs)
            with app.app_context():
                elsewhere = ProvisionerJob.waiting() & (ProvisionerJob.organization_id != DEFAULT_ORGANIZATION_ID)
                waiting = db.session.scalar(select(db.func.count()).where(elsewhere)) or 0
            crowded += pickups(deployment, ours, args.jobs)
            unqueue(deployment, queued)
        paths = {
            "API templates": "/api/v2/templates",
            "page /templates": "/templates",
            "API workspaces (first 100)": "/api/v2/workspaces",
            "page /workspaces": "/workspaces",
        }
        timings = time_requests(deployment, paths, signed_in(deployment, "member"), args.requests, args.warmup)
        listed = app.test_client().get("/api/v2/templates?limit=1000", headers=deployment.member_auth).json
    print(f"{ORGANIZATIONS} organisations, {TEMPLATES} templates, {args.workspaces:,} workspaces, {DAEMONS} daemons")
    print(f"pickup by a daemon of one organisation, {len(alone)} + {len(crowded)} jobs (server time, ms):")
    alone_p95, crowded_p95 = percentile(alone, 0.95), percentile(crowded, 0.95)
    print(f"  alone: p50 {percentile(alone, 0.5):.1f}, p95 {alone_p95:.1f}")
    print(f"  the others' queues holding {waiting:,} jobs: p50 {percentile(crowded, 0.5):.1f}, p95 {crowded_p95:.1f}")
    ratio = crowded_p95 / alone_p95
    print(f"  p95 ratio crowded/alone: {ratio:.2f} (target: p95 <= 100 ms, the same as alone)")
    print(f"as a member of one organisation ({len(listed)} templates of {TEMPLATES} visible):")
    worst = 0.0
    for label, (p50, p99, size) in timings.items():
        worst = max(worst, p99)
        print(f"  {label:28} p50 {p50:6.1f}  p99 {p99:6.1f} ms  ({size})")
    print(f"slowest p99: {worst:.1f} ms (target <= 100 ms)")


if __name__ == "__main__":
    main()
