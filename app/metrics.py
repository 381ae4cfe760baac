"""``/metrics``: Prometheus text for provisioning, read from the database at scrape time (so every replica
reports the same numbers). Scrapers authenticate with an owner's or template admin's API token."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

from flask import Blueprint, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import case, func, select

from app.auth.access import api_user
from app.catalog.models import Template, TemplateVersion
from app.catalog.presets import preset_id
from app.core.errors import Forbidden
from app.core.extensions import csrf, db
from app.prebuilds.services import pools
from app.provisioning.models import FAILED, ProvisionerJob
from app.provisioning.overview import DAEMON_STATUSES, daemon_views
from app.provisioning.queue import queue_depths
from app.users.models import PREBUILDS_USER_ID, ROLE_AUDITOR, ROLE_OWNER, ROLE_TEMPLATE_ADMIN
from app.workspaces.models import Workspace, WorkspaceBuild

bp = Blueprint("metrics", __name__)
csrf.exempt(bp)
# Coder's provisionerd job timing buckets.
DURATION_BUCKETS = (1, 10, 30, 60, 300, 600, 1800, 3600)


class ProvisioningCollector(Collector):
    def collect(self) -> Iterator[Metric]:
        yield self._jobs_by_status()
        yield self._job_durations()
        yield self._daemons_by_status()
        yield self._queue_depth()

    def _jobs_by_status(self) -> Metric:
        family = GaugeMetricFamily(
            "slipway_provisioner_jobs", "Provisioner jobs by type and status.", labels=["type", "status"]
        )
        status = ProvisionerJob.status.label("status")
        rows = db.session.execute(
            select(ProvisionerJob.type, status, func.count()).group_by(ProvisionerJob.type, status)
        )
        for job_type, job_status, count in rows:
            family.add_metric([job_type, job_status], count)
        return family

    def _job_durations(self) -> Metric:
        """Start to finish of every finished job that started, by type and result."""
        family = HistogramMetricFamily(
            "slipway_provisioner_job_duration_seconds",
            "Time from a daemon taking a job to its end, by type and result.",
            labels=["type", "result"],
        )
        rows = db.session.execute(
            select(
                ProvisionerJob.type, ProvisionerJob.status, ProvisionerJob.started_at, ProvisionerJob.completed_at
            ).where(ProvisionerJob.completed_at.is_not(None), ProvisionerJob.started_at.is_not(None))
        )
        durations: dict[tuple[str, str], list[float]] = {}
        for job_type, result, started, completed in rows:
            if started is not None and completed is not None:  # guaranteed by the query; typed as optional
                seconds = max((completed - started).total_seconds(), 0.0)
                durations.setdefault((job_type, result), []).append(seconds)
        for (job_type, result), values in sorted(durations.items()):
            buckets = [(str(bound), sum(1 for value in values if value <= bound)) for bound in DURATION_BUCKETS]
            buckets.append(("+Inf", len(values)))
            family.add_metric([job_type, result], buckets, sum(values))
        return family

    def _daemons_by_status(self) -> Metric:
        family = GaugeMetricFamily("slipway_provisioner_daemons", "Provisioner daemons by status.", labels=["status"])
        counts = Counter(view.status for view in daemon_views())
        for status in DAEMON_STATUSES:
            family.add_metric([status], counts[status])
        return family

    def _queue_depth(self) -> Metric:
        family = GaugeMetricFamily(
            "slipway_provisioner_queue_depth", "Pending jobs per tag set (the queue they wait on).", labels=["queue"]
        )
        for queue, count in sorted(queue_depths().items()):
            family.add_metric([queue], count)
        return family


class PrebuildsCollector(Collector):
    """Coder's prebuilt workspace metrics (coderd_prebuilt_workspaces_*) under our prefix, per template and preset:
    the totals read from the builds (every prebuild's first build is the reconciler's), the gauges from the pools."""

    def collect(self) -> Iterator[Metric]:
        labels = ["template_name", "preset_name"]
        created = CounterMetricFamily("slipway_prebuilt_workspaces_created", "Prebuilds created.", labels=labels)
        failed = CounterMetricFamily(
            "slipway_prebuilt_workspaces_failed", "Prebuilds whose build failed.", labels=labels
        )
        claimed = CounterMetricFamily("slipway_prebuilt_workspaces_claimed", "Prebuilds claimed.", labels=labels)
        # Grouped by plain columns (the job's status is a CASE over several, which PostgreSQL will not group by
        # when it is bound twice): failures and claims are summed.
        claimed_flag = case((Workspace.owner_id != PREBUILDS_USER_ID, 1), else_=0)
        failed_flag = case((ProvisionerJob.status == FAILED, 1), else_=0)
        rows = db.session.execute(
            select(
                Template.name,
                WorkspaceBuild.template_version_id,
                WorkspaceBuild.template_version_preset_id,
                func.count(),
                func.sum(failed_flag),
                func.sum(claimed_flag),
            )
            .join(ProvisionerJob, ProvisionerJob.id == WorkspaceBuild.job_id)
            .join(Workspace, Workspace.id == WorkspaceBuild.workspace_id)
            .join(Template, Template.id == Workspace.template_id)
            .where(WorkspaceBuild.build_number == 1, ProvisionerJob.initiator_id == PREBUILDS_USER_ID)
            .group_by(Template.name, WorkspaceBuild.template_version_id, WorkspaceBuild.template_version_preset_id)
        ).all()
        versions = {row[1] for row in rows}
        names = {
            (version.id, preset_id(version.id, preset.name)): preset.name
            for version in db.session.scalars(select(TemplateVersion).where(TemplateVersion.id.in_(versions)))
            for preset in version.presets
        }
        totals: dict[tuple[str, str], list[int]] = {}
        for template_name, version_id, wanted, count, failures, claims in rows:
            key = (template_name, names.get((version_id, wanted or ""), ""))
            total = totals.setdefault(key, [0, 0, 0])
            total[0] += count
            total[1] += int(failures or 0)
            total[2] += int(claims or 0)
        for key, (made, broke, taken) in sorted(totals.items()):
            created.add_metric(list(key), made)
            failed.add_metric(list(key), broke)
            claimed.add_metric(list(key), taken)
        yield from (created, failed, claimed)
        template_names: dict[str, str] = {
            ident: name for ident, name in db.session.execute(select(Template.id, Template.name))
        }
        desired = GaugeMetricFamily("slipway_prebuilt_workspaces_desired", "Prebuilds a pool wants.", labels=labels)
        running = GaugeMetricFamily("slipway_prebuilt_workspaces_running", "Prebuilds running.", labels=labels)
        eligible = GaugeMetricFamily(
            "slipway_prebuilt_workspaces_eligible", "Prebuilds ready to be claimed.", labels=labels
        )
        for pool in pools():
            pool_key = [template_names.get(pool.template_id, pool.template_id), pool.preset_name]
            desired.add_metric(pool_key, pool.desired)
            running.add_metric(pool_key, pool.running)
            eligible.add_metric(pool_key, pool.ready)
        yield from (desired, running, eligible)


@bp.get("/metrics")
def metrics() -> Response:
    if not api_user().has_role(ROLE_OWNER, ROLE_TEMPLATE_ADMIN, ROLE_AUDITOR):
        raise Forbidden("Metrics are for owners, template admins and auditors.")
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ProvisioningCollector())
    registry.register(PrebuildsCollector())
    return Response(generate_latest(registry), mimetype=CONTENT_TYPE_LATEST)
