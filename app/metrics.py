"""``/metrics``: Prometheus text for provisioning, read from the database at scrape time (so every replica
reports the same numbers). Scrapers authenticate with an owner's or template admin's API token."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

from flask import Blueprint, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import func, select

from app.auth.access import api_user
from app.core.errors import Forbidden
from app.core.extensions import csrf, db
from app.provisioning.models import ProvisionerJob
from app.provisioning.overview import DAEMON_STATUSES, daemon_views
from app.provisioning.queue import queue_depths
from app.users.models import ROLE_AUDITOR, ROLE_OWNER, ROLE_TEMPLATE_ADMIN

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


@bp.get("/metrics")
def metrics() -> Response:
    if not api_user().has_role(ROLE_OWNER, ROLE_TEMPLATE_ADMIN, ROLE_AUDITOR):
        raise Forbidden("Metrics are for owners, template admins and auditors.")
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ProvisioningCollector())
    return Response(generate_latest(registry), mimetype=CONTENT_TYPE_LATEST)
