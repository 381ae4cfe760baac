"""What a job's Terraform did when: the stages (init, plan, apply) and each resource Terraform's `-json` hooks name.

The executor tells the recorder where a stage begins and ends and hands it every JSON event; the recorder pairs
each resource's start hook with its end hook. The daemon sends what it holds with the job's outcome, whatever the
outcome: a failed build's timings show where it failed.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from protocol.timings import MAX_RESOURCE_CHARS, MAX_TIMINGS, WHOLE_STAGE, ProvisionerTiming

TERRAFORM = "terraform"
# Terraform's hooks: a resource's change (and a data source's read) starts with apply_start and ends with one of
# the others; a refresh (reading what exists, while planning) with refresh_start and refresh_complete.
_STARTS = {"apply_start": "", "refresh_start": "refresh"}
_ENDS = {"apply_complete": "", "apply_errored": "", "refresh_complete": "refresh"}


def utc_stamp(at: datetime | None = None) -> str:
    return (at or datetime.now(UTC)).astimezone(UTC).isoformat().replace("+00:00", "Z")


def event_time(event: Mapping[str, Any]) -> str:
    """The event's own timestamp (Terraform's, with microseconds), or now when it has none that parses."""
    stamp = event.get("@timestamp")
    if isinstance(stamp, str):
        try:
            return utc_stamp(datetime.fromisoformat(stamp))
        except ValueError:
            pass
    return utc_stamp()


class TimingRecorder:
    """Collects a job's timings. Thread-safe: the executor's output reader and the job's thread both call it."""

    def __init__(self, limit: int = MAX_TIMINGS) -> None:
        self._limit = limit
        self._timings: list[ProvisionerTiming] = []
        self._open: dict[tuple[str, str], tuple[str, str, str]] = {}  # (kind, address) -> (stage, action, start)
        self._lock = threading.Lock()

    def timings(self) -> tuple[ProvisionerTiming, ...]:
        with self._lock:
            return tuple(self._timings)

    def add(
        self, stage: str, started_at: str, *, action: str, ended_at: str = "", source: str = TERRAFORM,
        resource: str = WHOLE_STAGE,
    ) -> None:  # fmt: skip
        """One finished bar (ending now unless ``ended_at`` says when)."""
        self._keep(stage, started_at, ended_at or utc_stamp(), source, action, resource)

    def add_stage(self, stage: str, started_at: str, action: str) -> None:
        self.add(stage, started_at, action=action, resource=WHOLE_STAGE)

    def on_event(self, stage: str, event: Mapping[str, Any]) -> None:
        """A `-json` event of a command running in ``stage``: resource hooks open and close bars."""
        kind = str(event.get("type", ""))
        hook = event.get("hook")
        if not isinstance(hook, Mapping) or (kind not in _STARTS and kind not in _ENDS):
            return
        resource = hook.get("resource")
        if not isinstance(resource, Mapping) or not isinstance(resource.get("addr"), str):
            return
        address = resource["addr"][:MAX_RESOURCE_CHARS]
        action = str(hook.get("action") or "")
        if kind in _STARTS:
            with self._lock:
                self._open[(_STARTS[kind], address)] = (stage, action or _STARTS[kind], event_time(event))
            return
        with self._lock:
            opened = self._open.pop((_ENDS[kind], address), None)
        if opened is None:  # an end without its start (a line lost): nothing to measure from
            return
        started_stage, started_action, started_at = opened
        provider = str(resource.get("implied_provider") or str(resource.get("resource_type", "")).split("_")[0])
        self._keep(started_stage, started_at, event_time(event), provider, started_action, address)

    def close_open(self) -> None:
        """Bars whose end never came (the command was canceled or killed) end now."""
        with self._lock:
            opened, self._open = self._open, {}
        now = utc_stamp()
        for (_, address), (stage, action, started_at) in opened.items():
            self._keep(stage, started_at, now, "", action, address)

    def _keep(self, stage: str, started_at: str, ended_at: str, source: str, action: str, resource: str) -> None:
        with self._lock:
            if len(self._timings) >= self._limit:  # a template of thousands of resources: the first ones are kept
                return
            self._timings.append(
                ProvisionerTiming(
                    stage=stage, started_at=started_at, ended_at=ended_at,
                    source=source[:64], action=action[:64], resource=resource,
                )
            )  # fmt: skip
