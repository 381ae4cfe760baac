"""The health report (API.md "Provisioners": ``GET /api/v2/debug/health``), in the shape of Coder's healthcheck:
sections with a severity, warnings ``{code, message}`` and ``dismissed``.

What an admin wants to know before people complain: the database or Redis slow, the access URL not reachable
from the server (agents and links would fail), WebSockets broken on the way in (terminals, SSH), and whether
builds can run at all — templates whose tags no online daemon serves, daemons gone silent or of another version,
queues piling up. A report is cached in Redis so the navigation's red dot costs one read.
"""

from __future__ import annotations

import json
import logging
import secrets
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import httpx
from flask import current_app
from sqlalchemy import func, select, text
from sqlalchemy.orm import aliased
from websockets.exceptions import WebSocketException
from websockets.sync.client import connect

from app.auditing.services import verify_chain
from app.catalog.models import Template, TemplateVersion
from app.core.columns import rfc3339, utcnow
from app.core.config import Settings
from app.core.disk import MIN_FREE_BYTES, WARN_FREE_SHARE, database_size, disk_space
from app.core.extensions import db
from app.core.redis_client import get_redis
from app.core.signing import signer
from app.core.version import server_version
from app.organizations.models import DEFAULT_ORGANIZATION_ID
from app.organizations.services import organization_names
from app.prebuilds import services as prebuild_services
from app.provisioning.models import ProvisionerDaemon, ProvisionerJob
from app.provisioning.queue import queue_depths, untagged_rule
from app.users.models import User
from app.workspaces.models import Workspace, WorkspaceBuild
from protocol.codec import JsonObject
from protocol.tags import LOW_PRIORITY_SUFFIX, RESERVED, SCOPE_USER, UNTAGGED_ONLY, daemon_can_run, format_tags
from protocol.values import format_size

log = logging.getLogger("slipway.health")
OK, WARNING, ERROR = "ok", "warning", "error"
SEVERITY_ORDER = (OK, WARNING, ERROR)
SECTIONS = ("database", "redis", "access_url", "websocket", "provisioners", "audit", "prebuilds")
# Medians of five round trips above these are worth a look (Coder's database default is 15 ms).
DATABASE_THRESHOLD_MS = 15.0
REDIS_THRESHOLD_MS = 15.0
PROBES = 5
# Pending jobs in one queue (tag set) above which builds are visibly waiting.
QUEUE_DEPTH_WARNING = 25
CHECK_TIMEOUT = 5.0
REPORT_KEY = "slipway:health:report"
DISMISSED_KEY = "slipway:health:dismissed"
REPORT_TTL_SECONDS = 600
REFRESH_LOCK_KEY = "slipway:health:refreshing"
REFRESH_LOCK_SECONDS = 60
_PROCESS_STARTED = time.monotonic()
WS_PURPOSE = "debug-ws"
WS_TOKEN_SECONDS = 30


class Section:
    def __init__(self) -> None:
        self.warnings: list[dict[str, str]] = []
        self.severity = OK
        self.details: dict[str, Any] = {}

    def warn(self, code: str, message: str, severity: str = WARNING, *, organization_id: str = "") -> None:
        """``organization_id``: the finding is one organisation's (the page groups them by it)."""
        warning = {"code": code, "message": message}
        if organization_id:
            warning["organization_id"] = organization_id
        self.warnings.append(warning)
        if SEVERITY_ORDER.index(severity) > SEVERITY_ORDER.index(self.severity):
            self.severity = severity

    def to_json(self, dismissed: bool) -> JsonObject:
        return {"severity": self.severity, "warnings": list(self.warnings), "dismissed": dismissed, **self.details}


def _settings() -> Settings:
    settings: Settings = current_app.config["SLIPWAY_SETTINGS"]
    return settings


def _median_ms(probe: Callable[[], object]) -> float:
    samples = []
    for _ in range(PROBES):
        began = time.perf_counter()
        probe()
        samples.append((time.perf_counter() - began) * 1000)
    return round(statistics.median(samples), 2)


def check_database() -> Section:
    section = Section()
    try:
        latency = _median_ms(lambda: db.session.execute(text("SELECT 1")))
    except Exception as exc:  # whatever the driver raises, the finding is the same
        section.warn("database_unreachable", f"The database did not answer: {type(exc).__name__}.", ERROR)
        return section
    finally:
        db.session.rollback()
    section.details.update(latency_ms=latency, threshold_ms=DATABASE_THRESHOLD_MS)
    if latency > DATABASE_THRESHOLD_MS:
        section.warn(
            "database_slow", f"The database answers in {latency} ms (median), over {DATABASE_THRESHOLD_MS} ms."
        )
    _check_space(section)
    return section


def _check_space(section: Section) -> None:
    """The database's size, and the room left where the data dir lives."""
    try:
        section.details["size_bytes"] = database_size()
    except Exception:  # a size that cannot be read is no finding of its own
        log.warning("health: cannot read the database size", exc_info=True)
    finally:
        db.session.rollback()
    data_dir = _settings().data_dir
    try:
        free, total = disk_space(data_dir)
    except OSError as exc:
        section.warn("data_dir_unreadable", f"The data dir {data_dir} cannot be read: {exc.strerror}.", ERROR)
        return
    section.details.update(disk_free_bytes=free, disk_total_bytes=total)
    if free < MIN_FREE_BYTES:
        section.warn("disk_full", f"The disk of the data dir is full: {format_size(free)} free.", ERROR)
    elif total and free / total < WARN_FREE_SHARE:
        section.warn(
            "disk_nearly_full",
            f"The disk of the data dir is nearly full: {format_size(free)} of {format_size(total)} free.",
        )


def check_redis() -> Section:
    section = Section()
    try:
        latency = _median_ms(get_redis().ping)
    except Exception as exc:  # whatever the client raises, the finding is the same
        section.warn("redis_unreachable", f"Redis did not answer: {type(exc).__name__}.", ERROR)
        return section
    section.details.update(latency_ms=latency, threshold_ms=REDIS_THRESHOLD_MS)
    if latency > REDIS_THRESHOLD_MS:
        section.warn("redis_slow", f"Redis answers in {latency} ms (median), over {REDIS_THRESHOLD_MS} ms.")
    return section


def check_access_url() -> Section:
    """The server reaches itself at its access URL, as agents and people's browsers must."""
    section = Section()
    url = _settings().access_url
    section.details["access_url"] = url
    try:
        reply = httpx.get(f"{url}/healthz", timeout=CHECK_TIMEOUT)
    except httpx.HTTPError as exc:
        section.details["reachable"] = False
        section.warn(
            "access_url_unreachable",
            f"{url} is not reachable from the server ({type(exc).__name__}): agents and links use it.",
            ERROR,
        )
        return section
    section.details.update(reachable=True, status_code=reply.status_code)
    if reply.status_code != 200:
        section.warn("access_url_not_ok", f"{url}/healthz answered HTTP {reply.status_code}.", ERROR)
    return section


def ws_signature(expires: str) -> str:
    return signer().sign(WS_PURPOSE, expires)


def check_websocket() -> Section:
    """A WebSocket echo through the access URL: proxies that drop the upgrade break terminals and SSH."""
    section = Section()
    url = _settings().access_url
    expires = str(int(time.time()) + WS_TOKEN_SECONDS)
    target = url.replace("http", "ws", 1) + f"/api/v2/debug/ws?expires={expires}&signature={ws_signature(expires)}"
    message = secrets.token_hex(8)
    try:
        with connect(target, open_timeout=CHECK_TIMEOUT, close_timeout=1) as websocket:
            websocket.send(message)
            echoed = websocket.recv(timeout=CHECK_TIMEOUT)
    except (OSError, TimeoutError, WebSocketException) as exc:
        section.warn("websocket_failed", f"A WebSocket through {url} failed ({type(exc).__name__}).", ERROR)
        return section
    if echoed != message:
        section.warn("websocket_garbled", "The WebSocket echo came back different.", ERROR)
    return section


def check_provisioners() -> Section:
    section = Section()
    now = utcnow()
    daemons = db.session.scalars(select(ProvisionerDaemon).order_by(ProvisionerDaemon.name)).all()
    online = [daemon for daemon in daemons if daemon.is_online]
    # An autoscaler's run-once daemons go offline as their normal end: only the others' silence is news.
    silent = [daemon.name for daemon in daemons if not daemon.is_online and not daemon.ephemeral]
    section.details.update(online=len(online), offline=len(silent))
    if not online:
        section.warn("no_daemons", "No provisioner daemon is online: no template import or build can run.", ERROR)
    if silent:
        section.warn("daemons_silent", f"Silent for over 90 s: {', '.join(silent[:10])}.")
    ours = server_version()
    other = sorted({f"{daemon.name} ({daemon.version})" for daemon in online if daemon.version != ours})
    if other:
        section.warn("daemon_version", f"Daemons of another version than the server's {ours}: {', '.join(other)}.")
    names = organization_names()
    rule = untagged_rule()
    findings = _unserved_waiting(online, rule, now, names)
    warned = {(finding.organization_id, _tag_key(finding.tags)) for finding in findings}
    for finding in findings:
        message = _in_organization(names, finding.organization_id) + finding.message()
        section.warn("tags_unserved", message, organization_id=finding.organization_id)
    if online:
        # Templates whose active version builds with tags nobody serves: their next build would wait, even when
        # none waits yet. A tag set that jobs already wait on was named above, with more to say.
        for (organization_id, tags), templates in _needed_tag_sets().items():
            if (organization_id, tags) in warned or _served(online, organization_id, dict(tags), rule):
                continue
            plural = len(templates) > 1
            section.warn(
                "tags_unserved",
                f"{_in_organization(names, organization_id)}No online daemon serves {format_tags(dict(tags))}, which "
                f"template{'s' if plural else ''} {', '.join(sorted(templates))} need{'' if plural else 's'}: "
                f"their builds would wait.",
                organization_id=organization_id,
            )
    section.details["unserved"] = [finding.to_json() for finding in findings]
    section.details["organizations"] = _by_organization(names, online, findings)
    for queue, count in sorted(queue_depths().items()):
        if count > QUEUE_DEPTH_WARNING:
            section.warn("queue_deep", f"{count} jobs are waiting in {queue}.")
    section.details["checked_at"] = rfc3339(now)
    return section


TagKey = tuple[tuple[str, str], ...]


def _tag_key(tags: Mapping[str, str]) -> TagKey:
    return tuple(sorted(tags.items()))


def _in_organization(names: Mapping[str, str], organization_id: str) -> str:
    """Messages name their organisation once there is more than one (until then it would only be noise)."""
    return f"Organisation {names.get(organization_id, organization_id)}: " if len(names) > 1 else ""


@dataclass(frozen=True)
class Unserved:
    """Jobs of one organisation waiting on a tag set that no online daemon serves."""

    organization_id: str
    tags: dict[str, str]
    jobs: int
    oldest: datetime
    waited_seconds: int
    example: str
    fix: str

    def message(self) -> str:
        waits = f"{self.jobs} job{'s' if self.jobs > 1 else ''} wait{'' if self.jobs > 1 else 's'}"
        seconds = self.waited_seconds
        since = f"{seconds // 60}m {seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"
        return (
            f"No online daemon serves {format_tags(self.tags)}: {waits} on it, "
            f"{'the oldest' if self.jobs > 1 else 'it'} for {since} (e.g. {self.example}). Fix: {self.fix}."
        )

    def to_json(self) -> JsonObject:
        return {
            "organization_id": self.organization_id,
            "tags": dict(self.tags),
            "shown": format_tags(self.tags),
            "jobs": self.jobs,
            "oldest_created_at": rfc3339(self.oldest),
            "oldest_waiting_seconds": self.waited_seconds,
            "example": self.example,
            "fix": self.fix,
        }


def _unserved_waiting(
    online: Sequence[ProvisionerDaemon], rule: str, now: datetime, names: Mapping[str, str]
) -> list[Unserved]:
    """Every tag set that waiting jobs need and no online daemon serves, per organisation: how many wait, since
    when, an example and the fix.

    One query over the waiting jobs (the partial index of unfinished jobs serves its filter): grouped by tag set
    (the queue's name, both priorities as one) and organisation, with each group's size and its oldest job, whose
    tags and names stand for the group. Matching is the acquire path's: a daemon of the job's organisation whose
    tags take it.
    """
    version_template = aliased(Template)
    tag_set = func.replace(ProvisionerJob.queue, LOW_PRIORITY_SUFFIX, "")
    organization_id = ProvisionerJob.organization_id
    group = (tag_set, organization_id)
    waiting = (
        select(
            ProvisionerJob.tags,
            ProvisionerJob.created_at,
            organization_id.label("organization_id"),
            TemplateVersion.name.label("version"),
            func.coalesce(version_template.name, TemplateVersion.publish_as).label("template"),
            Workspace.name.label("workspace"),
            User.username.label("owner"),
            func.count().over(partition_by=group).label("jobs"),
            func.row_number()
            .over(partition_by=group, order_by=(ProvisionerJob.created_at, ProvisionerJob.id))
            .label("rank"),
        )
        .outerjoin(TemplateVersion, TemplateVersion.job_id == ProvisionerJob.id)
        .outerjoin(version_template, version_template.id == TemplateVersion.template_id)
        .outerjoin(WorkspaceBuild, WorkspaceBuild.job_id == ProvisionerJob.id)
        .outerjoin(Workspace, Workspace.id == WorkspaceBuild.workspace_id)
        .outerjoin(User, User.id == Workspace.owner_id)
        .where(ProvisionerJob.waiting())
        .subquery()
    )
    rows = db.session.execute(
        select(waiting).where(waiting.c.rank == 1).order_by(waiting.c.created_at, waiting.c.organization_id)
    ).all()
    findings = []
    for row in rows:
        tags: dict[str, str] = dict(row.tags)
        if _served(online, row.organization_id, tags, rule):
            continue
        if row.workspace is not None:
            example = f"workspace {row.owner}/{row.workspace}"
        else:
            example = f"version {row.version}" + (f" of template {row.template}" if row.template else "")
        waited = max(0, int((now - row.created_at).total_seconds()))
        organization = "" if row.organization_id == DEFAULT_ORGANIZATION_ID else names.get(row.organization_id, "")
        fix = _fix(tags, rule, row.owner, organization)
        findings.append(Unserved(str(row.organization_id), tags, int(row.jobs), row.created_at, waited, example, fix))
    return findings


def _served(online: Sequence[ProvisionerDaemon], organization_id: str, tags: Mapping[str, str], rule: str) -> bool:
    return any(d.organization_id == organization_id and daemon_can_run(d.tags, tags, rule) for d in online)


def _fix(tags: Mapping[str, str], rule: str, owner: str | None, organization: str = "") -> str:
    """The one command that would serve the tag set (a key with these tags does it too, for organisation ones);
    ``organization``: the job's, when not the default one."""
    org = f" --org {organization}" if organization else ""
    free = " ".join(f"--tag {key}={value}" for key, value in sorted(tags.items()) if key not in RESERVED)
    if tags.get("scope") == SCOPE_USER:
        who = owner or "its owner"
        return f"{who} starts a daemon of their own: slipway provisionerd start{org} --tag scope=user {free}".rstrip()
    if not free:
        untagged = " with no tags" if rule == UNTAGGED_ONLY else ""
        return f"start a daemon{untagged}: slipway provisionerd start{org}"
    return f"start a daemon with these tags: slipway provisionerd start{org} {free} (or a provisioner key with them)"


def _by_organization(
    names: Mapping[str, str], online: Sequence[ProvisionerDaemon], findings: Sequence[Unserved]
) -> list[JsonObject]:
    """The section per organisation: its online daemons and the tag sets its waiting jobs need unserved."""
    return [
        {
            "id": organization_id,
            "name": name,
            "online": sum(1 for daemon in online if daemon.organization_id == organization_id),
            "unserved": [finding.to_json() for finding in findings if finding.organization_id == organization_id],
        }
        for organization_id, name in names.items()
    ]


def _needed_tag_sets() -> dict[tuple[str, TagKey], set[str]]:
    """The tag sets the active versions of templates build with, per organisation (organisation scope: a
    person's own daemons are theirs to run, and a waiting build of theirs is named above), and the templates that
    need each."""
    rows = db.session.execute(
        select(Template.organization_id, Template.name, ProvisionerJob.tags)
        .join(TemplateVersion, TemplateVersion.id == Template.active_version_id)
        .join(ProvisionerJob, ProvisionerJob.id == TemplateVersion.job_id)
        .where(Template.deleted_at.is_(None))
    ).all()
    needed: dict[tuple[str, TagKey], set[str]] = {}
    for organization_id, name, tags in rows:
        if tags.get("scope") != SCOPE_USER:
            needed.setdefault((str(organization_id), _tag_key(tags)), set()).add(name)
    return needed


def check_audit() -> Section:
    """The audit log's hash chain, walked end to end: the first entry changed or removed behind its back."""
    section = Section()
    result = verify_chain()
    section.details.update(entries_checked=result.checked, broken_at=result.broken_at)
    if not result.ok:
        section.warn("audit_chain_broken", f"The audit log's chain breaks: {result.reason}.", ERROR)
    return section


def check_prebuilds() -> Section:
    """Pools below their target that will not fill by themselves: their last builds failed (the reconciler backs off
    between tries), or reconciliation is paused. A pool that is merely filling is no finding."""
    section = Section()
    paused = prebuild_services.is_paused()
    pools = prebuild_services.pools()
    short = [pool for pool in pools if pool.running < pool.desired and (pool.failures > 0 or paused)]
    ids = {pool.template_id for pool in short}
    names = {
        row.id: row.name for row in db.session.execute(select(Template.id, Template.name).where(Template.id.in_(ids)))
    }
    for pool in short:
        where = f"Template {names.get(pool.template_id, pool.template_id)}, preset {pool.preset_name}"
        held = f"{pool.running} of {pool.desired} prebuilt workspaces running"
        if pool.failures > 0:
            retry = f"; next try after {rfc3339(pool.backoff_until)}" if pool.backoff_until else ""
            why = f"{pool.failures} failed build(s) in a row, the last: {pool.failure_reason}{retry}"
        else:
            why = "reconciliation is paused (slipway prebuilds resume)"
        section.warn("prebuild_pool_short", f"{where}: {held}; {why}.")
    section.details.update(paused=paused, pools=len(pools), short=len(short))
    return section


CHECKS: dict[str, Callable[[], Section]] = {
    "database": check_database,
    "redis": check_redis,
    "access_url": check_access_url,
    "websocket": check_websocket,
    "provisioners": check_provisioners,
    "audit": check_audit,
    "prebuilds": check_prebuilds,
}


def dismissed_sections() -> list[str]:
    raw = get_redis().get(DISMISSED_KEY)
    return [name for name in json.loads(raw) if name in SECTIONS] if raw else []


def set_dismissed(names: list[str]) -> list[str]:
    get_redis().set(DISMISSED_KEY, json.dumps(sorted(set(names))))
    return dismissed_sections()


def run_report() -> JsonObject:
    dismissed = dismissed_sections()
    sections = {name: check().to_json(name in dismissed) for name, check in CHECKS.items()}
    counted = [section["severity"] for name, section in sections.items() if name not in dismissed]
    severity = max(counted, key=SEVERITY_ORDER.index, default=OK)
    report: JsonObject = {
        "time": rfc3339(utcnow()),
        "healthy": severity != ERROR,
        "severity": severity,
        "version": server_version(),
        **sections,
    }
    get_redis().set(REPORT_KEY, json.dumps(report), ex=REPORT_TTL_SECONDS)
    return report


def report(*, force: bool = False) -> JsonObject:
    """The cached report (at most 10 min old), or a new one."""
    if not force:
        raw = get_redis().get(REPORT_KEY)
        cached: JsonObject = json.loads(raw) if raw else {}
        if all(name in cached for name in SECTIONS):  # one cached by an older release lacks a section: made anew
            return cached
    return run_report()


def cached_severity() -> str | None:
    """For the navigation: the last report's severity, without running anything."""
    try:
        raw = get_redis().get(REPORT_KEY)
    except Exception:  # a page must render with Redis away
        return None
    severity = json.loads(raw).get("severity") if raw else None
    return str(severity) if severity else None


def refresh_report(settings: Settings) -> None:
    """From the maintenance loop: a new report once the cached one has expired, by one replica at a time, so the
    navigation's dot follows what goes wrong without anyone opening the Health page. Not in a process's first
    10 minutes: daemons are still registering after a start, and "none online" then would be a false alarm."""
    if time.monotonic() - _PROCESS_STARTED < REPORT_TTL_SECONDS:
        return
    redis = get_redis()
    if redis.exists(REPORT_KEY) or not redis.set(REFRESH_LOCK_KEY, "1", nx=True, ex=REFRESH_LOCK_SECONDS):
        return
    try:
        run_report()
    except Exception:  # the maintenance loop must go on; the next pass tries again
        log.warning("the health report could not be made", exc_info=True)
