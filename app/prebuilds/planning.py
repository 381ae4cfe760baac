"""The reconciler's decisions, as a pure function of what is and what is wanted (no database, no clock of its own),
so that every rule is tested by a table of cases (tests/test_prebuilds_planning.py).

For each template, the pools are the presets of its ACTIVE version with ``instances > 0``. A prebuild is one of
the ``prebuilds`` user's workspaces; :func:`plan` returns what to do this tick:

- a pool short of its target gets new prebuilds (``create``), unless its last builds failed: then it waits
  ``backoff_base * 2**(failures-1)`` (at most ``backoff_max``) after the last failure before trying again;
- a pool above its target deletes its surplus, the least useful first: still building, then running but not yet
  ready, then the oldest ready ones;
- a prebuild of an older version, of a preset that no longer exists or wants none, or that failed or was stopped,
  is deleted;
- every build a tick starts counts against ``max_in_flight`` per template (builds already running count too), so
  that a new version replaces the old one's pool gradually and a template can never flood the daemons; within
  that budget, filling pools comes first (people are waiting for those), then replacing obsolete prebuilds, then
  shrinking.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Final, Literal

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
class TemplateState:
    template_id: str
    active_version_id: str | None
    # The active version's presets that want prebuilds: name → instances.
    desired: dict[str, int]
    prebuilds: Sequence[Prebuild]
    # By preset name of the active version.
    failures: dict[str, Failures] = field(default_factory=dict)


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


@dataclass
class Plan:
    actions: list[Action] = field(default_factory=list)
    pools: list[PoolSummary] = field(default_factory=list)


def backoff_until(failures: Failures | None, *, base: timedelta, maximum: timedelta) -> datetime | None:
    if failures is None or failures.count <= 0:
        return None
    wait = base * (1 << min(failures.count - 1, 30))
    return failures.last_at + min(wait, maximum)


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
    wanted = {name: count for name, count in state.desired.items() if count > 0} if active else {}
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
            )
        )
        if len(pool) < count:
            if waiting_until is not None and waiting_until > now:
                continue
            # After a failure, one at a time: a broken template costs one build per backoff, not a pool's worth.
            missing = 1 if failures and failures.count > 0 else count - len(pool)
            assert active is not None  # noqa: S101 - wanted is empty without an active version
            creates.extend(
                Action("create", state.template_id, active, name, None, f"pool {name} has {len(pool)} of {count}")
                for _ in range(missing)
            )
        elif len(pool) > count:
            ordered = sorted(pool, key=lambda p: (_SURPLUS_ORDER[p.status], p.created_at, p.workspace_id))
            surplus.extend(
                _delete(state, p, f"pool {name} has {len(pool)}, wants {count}") for p in ordered[: len(pool) - count]
            )
    result.actions.extend((creates + obsolete + surplus)[:budget])


def _delete(state: TemplateState, prebuild: Prebuild, why: str) -> Action:
    return Action("delete", state.template_id, prebuild.version_id, prebuild.preset_name, prebuild.workspace_id, why)
