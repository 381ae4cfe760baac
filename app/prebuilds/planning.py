"""The reconciler's decisions, as a pure function of what is and what is wanted (no database, no clock of its own),
so that every rule is tested by a table of cases (tests/test_prebuilds_planning.py).

For each template, the pools are the presets of its ACTIVE version with ``instances > 0``. A prebuild is one of
the ``prebuilds`` user's workspaces; :func:`plan` returns what to do this tick:

- a pool short of its target gets new prebuilds (``create``), unless its last builds failed: then it waits
  ``backoff_base * 2**(failures-1)`` (at most ``backoff_max``) after the last failure before trying again;
- a pool's target is its preset's ``instances``, or the ``instances`` of the first of its ``scheduling`` schedules
  whose cron matches the hour in the schedules' time zone (:func:`desired_instances`);
- a pool above its target deletes its surplus, the least useful first: still building, then running but not yet
  ready, then the oldest ready ones;
- a prebuild older than its preset's ``expiration_policy.ttl`` is replaced: a fresh one is created first, and the
  expired one is deleted only once enough others are ready that the pool stays at its target (an expired prebuild
  still works, and people may claim it meanwhile);
- a prebuild of an older version, of a preset that no longer exists or wants none, or that failed or was stopped,
  is deleted;
- every build a tick starts counts against ``max_in_flight`` per template (builds already running count too), so
  that a new version replaces the old one's pool gradually and a template can never flood the daemons; within
  that budget, filling pools comes first (people are waiting for those), then replacing obsolete prebuilds, then
  shrinking.
"""

from __future__ import annotations

import functools
import zoneinfo
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Final, Literal

from protocol.cron import CronError, CronSchedule
from protocol.provisionerd import PrebuildScheduling

# Where a prebuild stands, read from its latest build and its agents (app/prebuilds/reconciler.py).
BUILDING: Final = "building"  # its start build is queued or running
RUNNING: Final = "running"  # started, agent not (yet) ready
READY: Final = "ready"  # started and every agent connected and ready: claimable
FAILED: Final = "failed"  # its latest build failed
STOPPED: Final = "stopped"  # stopped (by someone, or a stop build): of no use to anyone
DELETING: Final = "deleting"  # its delete build is queued or running
PrebuildStatus = Literal["building", "running", "ready", "failed", "stopped", "deleting"]

# The order in which a shrinking pool gives its prebuilds up: the least useful first.
_SURPLUS_ORDER = {BUILDING: 0, RUNNING: 1, READY: 2}


@dataclass(frozen=True)
class Prebuild:
    workspace_id: str
    version_id: str
    preset_name: str | None
    status: PrebuildStatus
    created_at: datetime


@dataclass(frozen=True)
class Failures:
    """A preset's failed prebuild builds since its last success: how many, and when the last one ended."""

    count: int
    last_at: datetime
    reason: str = ""


@dataclass(frozen=True)
class PoolPolicy:
    """A preset's prebuild settings beyond its base count: ``expiration_policy.ttl`` and ``scheduling``."""

    ttl: timedelta | None = None
    scheduling: PrebuildScheduling | None = None


@dataclass(frozen=True)
class TemplateState:
    template_id: str
    active_version_id: str | None
    # The active version's presets: name → base instances (a schedule may change the count by time of day).
    desired: dict[str, int]
    prebuilds: Sequence[Prebuild]
    # By preset name of the active version.
    failures: dict[str, Failures] = field(default_factory=dict)
    policies: dict[str, PoolPolicy] = field(default_factory=dict)


@dataclass(frozen=True)
class Action:
    kind: Literal["create", "delete"]
    template_id: str
    version_id: str
    preset_name: str | None
    workspace_id: str | None  # None for a create
    why: str


@dataclass(frozen=True)
class PoolSummary:
    """One pool as the template page and the metrics show it."""

    template_id: str
    preset_name: str
    desired: int
    running: int  # built and running (ready or not)
    ready: int
    building: int
    failures: int
    backoff_until: datetime | None
    failure_reason: str
    expired: int = 0  # older than the preset's ttl, waiting for their replacements


@dataclass
class Plan:
    actions: list[Action] = field(default_factory=list)
    pools: list[PoolSummary] = field(default_factory=list)


def backoff_until(failures: Failures | None, *, base: timedelta, maximum: timedelta) -> datetime | None:
    if failures is None or failures.count <= 0:
        return None
    wait = base * (1 << min(failures.count - 1, 30))
    return failures.last_at + min(wait, maximum)


def desired_instances(base: int, scheduling: PrebuildScheduling | None, now: datetime) -> int:
    """The pool's target at ``now``: the first schedule whose cron matches the hour in its time zone, else
    ``base`` (Coder's rule). Wall-clock hours, so across a DST change a schedule follows the clock: an hour skipped
    in spring matches nowhere that day, an hour repeated in autumn matches twice."""
    if scheduling is None or not scheduling.schedules:
        return base
    local = now.astimezone(_zone(scheduling.timezone))
    for schedule in scheduling.schedules:
        cron = _hourly_cron(schedule.cron)
        if cron is not None and cron.matches_hour(local):
            return schedule.instances
    return base


def _zone(name: str) -> tzinfo | None:
    """Go's time.LoadLocation names: "" and "UTC" are UTC, "Local" the server's own zone (None to astimezone)."""
    if name in ("", "UTC"):
        return UTC
    if name == "Local":
        return None
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        return UTC  # the import refused unknown zones; a zone the server's tzdata lost since counts as UTC


@functools.lru_cache(maxsize=1024)
def _hourly_cron(spec: str) -> CronSchedule | None:
    """Coder's five fields (minute hour day month weekday) read by protocol/cron.py, which counts seconds first;
    None for one the import would have refused (a row from elsewhere): that schedule never matches."""
    try:
        return CronSchedule.parse(f"0 {spec}")
    except CronError:
        return None


def plan(
    templates: Iterable[TemplateState],
    now: datetime,
    *,
    max_in_flight: int,
    backoff_base: timedelta,
    backoff_max: timedelta,
) -> Plan:
    result = Plan()
    for state in templates:
        _plan_template(state, now, max_in_flight, backoff_base, backoff_max, result)
    return result


def _plan_template(
    state: TemplateState, now: datetime, max_in_flight: int, base: timedelta, maximum: timedelta, result: Plan
) -> None:
    active = state.active_version_id
    targets = {
        name: desired_instances(count, state.policies.get(name, _NO_POLICY).scheduling, now)
        for name, count in state.desired.items()
    }
    wanted = {name: count for name, count in targets.items() if count > 0} if active else {}
    in_flight = sum(1 for p in state.prebuilds if p.status in (BUILDING, DELETING))
    budget = max(0, max_in_flight - in_flight)
    creates: list[Action] = []
    obsolete: list[Action] = []
    surplus: list[Action] = []
    live: dict[str, list[Prebuild]] = {name: [] for name in wanted}
    for prebuild in state.prebuilds:
        if prebuild.status == DELETING:
            continue
        current = prebuild.version_id == active and prebuild.preset_name in wanted
        if current and prebuild.status in _SURPLUS_ORDER:
            live[str(prebuild.preset_name)].append(prebuild)
            continue
        why = (
            f"its latest build {prebuild.status}"
            if prebuild.status in (FAILED, STOPPED)
            else "its version or preset no longer wants prebuilds"
        )
        obsolete.append(_delete(state, prebuild, why))
    for name, count in sorted(wanted.items()):
        pool = live[name]
        ttl = state.policies.get(name, _NO_POLICY).ttl
        expired = [p for p in pool if ttl is not None and p.created_at + ttl <= now]
        fresh = [p for p in pool if p not in expired]
        failures = state.failures.get(name)
        waiting_until = backoff_until(failures, base=base, maximum=maximum)
        result.pools.append(
            PoolSummary(
                template_id=state.template_id,
                preset_name=name,
                desired=count,
                running=sum(1 for p in pool if p.status in (RUNNING, READY)),
                ready=sum(1 for p in pool if p.status == READY),
                building=sum(1 for p in pool if p.status == BUILDING),
                failures=failures.count if failures else 0,
                backoff_until=waiting_until if waiting_until and waiting_until > now else None,
                failure_reason=failures.reason if failures else "",
                expired=len(expired),
            )
        )
        if len(fresh) < count and (waiting_until is None or waiting_until <= now):
            # After a failure, one at a time: a broken template costs one build per backoff, not a pool's worth.
            missing = 1 if failures and failures.count > 0 else count - len(fresh)
            assert active is not None  # noqa: S101 - wanted is empty without an active version
            creates.extend(
                Action("create", state.template_id, active, name, None, f"pool {name} has {len(fresh)} of {count}")
                for _ in range(missing)
            )
        ready = sum(1 for p in pool if p.status == READY)
        if len(fresh) > count:
            extra = _least_useful_first(fresh)[: len(fresh) - count]
            ready -= sum(1 for p in extra if p.status == READY)
            surplus.extend(_delete(state, p, f"pool {name} has {len(pool)}, wants {count}") for p in extra)
        for prebuild in _least_useful_first(expired):
            # An expired one that is ready goes only when the others ready still make the target.
            if prebuild.status == READY:
                if ready - 1 < count:
                    continue
                ready -= 1
            obsolete.append(_delete(state, prebuild, f"older than its preset's ttl ({ttl})"))
    result.actions.extend((creates + obsolete + surplus)[:budget])


_NO_POLICY = PoolPolicy()


def _least_useful_first(prebuilds: list[Prebuild]) -> list[Prebuild]:
    return sorted(prebuilds, key=lambda p: (_SURPLUS_ORDER[p.status], p.created_at, p.workspace_id))


def _delete(state: TemplateState, prebuild: Prebuild, why: str) -> Action:
    return Action("delete", state.template_id, prebuild.version_id, prebuild.preset_name, prebuild.workspace_id, why)
