"""A job's timings laid out as a waterfall: one row per stage, resource, agent connection and script, positioned
in percent of the whole span (the SVG then fits any width, its text keeps its size), with the critical path marked.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from app.timings.services import JobTimings
from protocol.timings import WHOLE_STAGE

STAGE_NAMES = {"init": "Init", "plan": "Plan", "graph": "Graph", "apply": "Apply"}
STAGE_ORDER = ("init", "plan", "graph", "apply")
LABEL_CHARS = 44
# Two bars closer than this (in seconds) follow one another: Terraform's own bookkeeping between them is not a gap.
FOLLOWS_SLACK = 0.25
# What the chain is walked through first; a stage's resources come second (see _mark_critical_path).
TOP_LEVEL = ("queue", "stage", "connect", "script")
# A resource shorter than this share of the whole is not marked critical (it would not show as a bar anyway).
VISIBLE_SHARE = 0.01
SLOWEST_WORTH_NAMING = 0.05  # seconds: "slowest resource: x 0.0 s" tells nobody anything
TICK_STEPS = (0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600)
MAX_TICKS = 6


@dataclass
class Row:
    label: str
    title: str
    kind: str  # queue | stage | resource | connect | script
    started_at: datetime
    ended_at: datetime
    failed: bool = False
    critical: bool = False
    left: float = 0.0  # percent of the span
    width: float = 0.0

    @property
    def seconds(self) -> float:
        return (self.ended_at - self.started_at).total_seconds()

    @property
    def duration(self) -> str:
        return format_seconds(self.seconds)


@dataclass
class Tick:
    left: float
    label: str


@dataclass
class Waterfall:
    rows: list[Row] = field(default_factory=list)
    ticks: list[Tick] = field(default_factory=list)
    total: str = ""
    # (name, duration) of each part, for the one-line summary above the chart.
    parts: list[tuple[str, str]] = field(default_factory=list)
    slowest: Row | None = None


def format_seconds(seconds: float) -> str:
    if seconds < 10:
        return f"{seconds:.1f} s"
    if seconds < 120:
        return f"{seconds:.0f} s"
    minutes, rest = divmod(int(round(seconds)), 60)
    return f"{minutes} min {rest} s" if rest else f"{minutes} min"


def waterfall(timings: JobTimings) -> Waterfall:
    rows = _rows(timings)
    if not rows:
        return Waterfall()
    origin = min(row.started_at for row in rows)
    end = max(row.ended_at for row in rows)
    span = max((end - origin).total_seconds(), 0.001)
    for row in rows:
        row.left = 100 * (row.started_at - origin).total_seconds() / span
        row.width = max(100 * row.seconds / span, 0.4)  # an instant still shows as a sliver
        row.left = min(row.left, 100 - row.width)
    _mark_critical_path(rows, span)
    resources = [row for row in rows if row.kind == "resource" and row.seconds >= SLOWEST_WORTH_NAMING]
    return Waterfall(
        rows=rows,
        ticks=_ticks(span),
        total=format_seconds(span),
        parts=_parts(rows),
        slowest=max(resources, key=lambda row: row.seconds) if resources else None,
    )


def _rows(timings: JobTimings) -> list[Row]:
    job, rows = timings.job, []
    if job.started_at is not None and job.started_at >= job.created_at:
        rows.append(Row("Queued", "Waiting for a provisioner daemon", "queue", job.created_at, job.started_at))
    by_stage: dict[str, list[Row]] = {}
    wholes: dict[str, Row] = {}
    for timing in timings.provisioner:
        if timing.resource == WHOLE_STAGE:
            name = STAGE_NAMES.get(timing.stage, timing.stage.capitalize())
            label = f"{name} (from the cache)" if "cache" in timing.action else name
            wholes.setdefault(timing.stage, Row(label, f"{name}: {timing.action}", "stage", timing.started_at,
                                                timing.ended_at))  # fmt: skip
            continue
        title = f"{timing.resource}: {timing.action}" + (f" ({timing.source})" if timing.source else "")
        by_stage.setdefault(timing.stage, []).append(
            Row(_short(timing.resource), title, "resource", timing.started_at, timing.ended_at)
        )
    stages = sorted({*wholes, *by_stage}, key=lambda stage: (_stage_rank(stage), _first_start(stage, wholes, by_stage)))
    for stage in stages:
        children = by_stage.get(stage, [])
        whole = wholes.get(stage) or Row(
            STAGE_NAMES.get(stage, stage.capitalize()), stage, "stage",
            min(row.started_at for row in children), max(row.ended_at for row in children),
        )  # fmt: skip
        rows.append(whole)
        rows += children
    for connection in timings.connections:
        rows.append(Row(f"Agent {connection.agent.name} connects", f"The agent {connection.agent.name} connects",
                        "connect", connection.started_at, connection.ended_at))  # fmt: skip
    for run in timings.scripts:
        script = run.timing
        title = f"{run.display_name} on {run.agent.name}: {script.status}, exit code {script.exit_code}"
        rows.append(Row(_short(run.display_name), title, "script", script.started_at, script.ended_at,
                        failed=script.status != "ok"))  # fmt: skip
    return rows


def _stage_rank(stage: str) -> int:
    return STAGE_ORDER.index(stage) if stage in STAGE_ORDER else len(STAGE_ORDER)


def _first_start(stage: str, wholes: dict[str, Row], by_stage: dict[str, list[Row]]) -> datetime:
    starts = [row.started_at for row in by_stage.get(stage, [])]
    if stage in wholes:
        starts.append(wholes[stage].started_at)
    return min(starts)


def _short(text: str) -> str:
    return text if len(text) <= LABEL_CHARS else text[: LABEL_CHARS - 1] + "…"


def _mark_critical_path(rows: list[Row], span: float) -> None:
    """The chain that decided how long the whole took: from the step that ends last back through the step that ended
    last before each one began (queue, stages, the agent's connection, scripts); then, within each stage on it, the
    same among its resources. A resource too short to see (a data source read in milliseconds) is not marked: the
    total did not wait on it in any way a reader could act on."""
    for row in _chain([row for row in rows if row.kind in TOP_LEVEL]):
        row.critical = True
    stage: Row | None = None
    children: dict[int, list[Row]] = {}
    for row in rows:
        if row.kind == "stage":
            stage = row
        elif row.kind == "resource" and stage is not None:
            children.setdefault(id(stage), []).append(row)
    for row in rows:
        if row.kind == "stage" and row.critical:
            for child in _chain(children.get(id(row), [])):
                child.critical = child.seconds >= span * VISIBLE_SHARE


def _chain(rows: list[Row]) -> list[Row]:
    if not rows:
        return []
    chain = [max(rows, key=lambda row: row.ended_at)]
    while True:
        current = chain[-1]
        earlier = [
            row for row in rows
            if row.started_at < current.started_at
            and (row.ended_at - current.started_at).total_seconds() <= FOLLOWS_SLACK
        ]  # fmt: skip
        if not earlier:
            return chain
        chain.append(max(earlier, key=lambda row: row.ended_at))


def _ticks(span: float) -> list[Tick]:
    step = next((step for step in TICK_STEPS if span / step <= MAX_TICKS), TICK_STEPS[-1] * (span // 21600 + 1))
    ticks, at = [], 0.0
    while at <= span:
        ticks.append(Tick(100 * at / span, format_seconds(at) if at else "0 s"))
        at += step
    return ticks


def _parts(rows: list[Row]) -> list[tuple[str, str]]:
    parts = []
    for row in rows:
        if row.kind in ("queue", "stage"):
            parts.append((row.label.split(" (")[0], row.duration))
    connects = [row for row in rows if row.kind == "connect"]
    if connects:
        parts.append(("agent", format_seconds(max(row.seconds for row in connects))))
    scripts = [row for row in rows if row.kind == "script"]
    if scripts:
        first, last = min(row.started_at for row in scripts), max(row.ended_at for row in scripts)
        parts.append(("scripts", format_seconds((last - first).total_seconds())))
    return parts
