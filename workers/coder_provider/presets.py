"""`data coder_workspace_preset`: a named set of parameter values, and the prebuilt workspaces kept ready for it.

Coder checks a preset's prebuild schedules with robfig/cron (five fields, the minute always `*`, so a schedule
covers whole hours) and then checks that no two schedules overlap. Our own cron module reads Coder's six-field
`coder_script` dialect, whose fields, bounds and messages differ, so the two checks are written out here, each in
the words of the Go code it stands for, which template authors will search for.
"""

from __future__ import annotations

import json
import re
import zoneinfo

from tf.schema import Block
from tf.types import Map
from tf.utils import Diagnostics

from workers.coder_provider.base import (
    BOOL,
    NUMBER,
    STRING,
    CoderDataSource,
    State,
    check_not_empty,
    check_url,
    computed,
    optional,
    required,
    schema,
)
from workers.coder_provider.framework import ListNestedBlock, SetNestedBlock

TTL_LIMITS = (3600, 31536000)  # an hour, a year; 0 turns expiry off
MONTHS = "jan feb mar apr may jun jul aug sep oct nov dec".split()
WEEKDAYS = "sun mon tue wed thu fri sat".split()
# robfig/cron's bounds for minute, hour, day of month, month, day of week, and the names it accepts.
CRON_FIELDS: tuple[tuple[int, int, dict[str, int]], ...] = (
    (0, 59, {}),
    (0, 23, {}),
    (1, 31, {}),
    (1, 12, {name: number for number, name in enumerate(MONTHS, 1)}),
    (0, 6, {name: number for number, name in enumerate(WEEKDAYS)}),
)
_GO_INT = re.compile(r"^[+-]?\d+$")


class ScheduleError(ValueError):
    pass


def go_atoi(text: str, context: str = "") -> int:
    """Go's strconv.Atoi, with its error text (after ``context``, as the Go code wraps it, when given)."""
    if not _GO_INT.match(text):
        error = f"strconv.Atoi: parsing {json.dumps(text)}: invalid syntax"
        raise ScheduleError(f"{context}: {error}" if context else error)
    return int(text)


def _cron_int(text: str, names: dict[str, int]) -> int:
    if text.lower() in names:
        return names[text.lower()]
    number = go_atoi(text, f"failed to parse int from {text}")
    if number < 0:
        raise ScheduleError(f"negative number ({number}) not allowed: {text}")
    return number


def _check_cron_range(expression: str, low: int, high: int, names: dict[str, int]) -> None:
    """One comma-separated part of a field, as robfig/cron's getRange reads it."""
    range_text, *steps = expression.split("/")
    bounds = range_text.split("-")
    if bounds[0] in ("*", "?"):
        start, end = low, high
    else:
        start = _cron_int(bounds[0], names)
        if len(bounds) > 2:
            raise ScheduleError(f"too many hyphens: {expression}")
        end = _cron_int(bounds[1], names) if len(bounds) == 2 else start
    step = 1
    if len(steps) > 1:
        raise ScheduleError(f"too many slashes: {expression}")
    if steps:
        step = _cron_int(steps[0], {})
        if len(bounds) == 1:
            end = high  # "5/10" runs from 5 to the end
    if start < low:
        raise ScheduleError(f"beginning of range ({start}) below minimum ({low}): {expression}")
    if end > high:
        raise ScheduleError(f"end of range ({end}) above maximum ({high}): {expression}")
    if start > end:
        raise ScheduleError(f"beginning of range ({start}) beyond end of range ({end}): {expression}")
    if step == 0:
        raise ScheduleError(f"step of range should be a positive number: {expression}")


def check_prebuild_cron(spec: str) -> str:
    """Coder's two checks of a prebuild schedule; the error message, or "" when it is valid."""
    fields = spec.split()
    if len(fields) != len(CRON_FIELDS):
        return "cron spec failed validation: cron specification should consist of 5 fields"
    if fields[0] != "*":
        return "cron spec failed validation: minute field should be *"
    try:
        for field, (low, high, names) in zip(fields, CRON_FIELDS, strict=True):
            for part in field.split(","):
                _check_cron_range(part, low, high, names)
    except ScheduleError as exc:
        return f"failed to parse cron spec: {exc}"
    return ""


def _overlap_values(text: str, highest: int) -> set[int]:
    """The values of a field for the overlap check, which reads numbers, ranges and lists only (no steps or
    names) and counts every field from 0."""
    if text == "*":
        return set(range(highest + 1))
    values: set[int] = set()
    for part in text.split(","):
        if "-" in part:
            first, last = part.split("-")[:2]
            start = go_atoi(first, "invalid start value in range")
            end = go_atoi(last, "invalid end value in range")
            if start < 0 or end > highest or start > end:
                raise ScheduleError(f"invalid range {start}-{end}: values must be between 0 and {highest}")
            values.update(range(start, end + 1))
        else:
            value = go_atoi(part, "invalid value")
            if not 0 <= value <= highest:
                raise ScheduleError(f"invalid value {value}: must be between 0 and {highest}")
            values.add(value)
    return values


def _fields_overlap(kind: str, first: str, second: str, highest: int) -> bool:
    try:
        return bool(_overlap_values(first, highest) & _overlap_values(second, highest))
    except ScheduleError as exc:
        raise ScheduleError(f"invalid {kind} range: {exc}") from None


def schedules_overlap(first: str, second: str) -> bool:
    """Whether two schedules can be active in the same hour: months, then days (a day of the month or of the
    week, as cron matches either when both are restricted), then hours."""
    a, b = first.split(), second.split()
    for spec, fields in ((first, a), (second, b)):
        if len(fields) != 5:
            raise ScheduleError(
                f"schedule {json.dumps(spec)} has {len(fields)} fields, expected 5 fields "
                "(minute hour day-of-month month day-of-week)"
            )
    if not _fields_overlap("month", a[3], b[3], 12):
        return False
    if a[2] == "*" or b[2] == "*":
        days = _fields_overlap("day", a[4], b[4], 6)
    elif a[4] == "*" or b[4] == "*":
        days = _fields_overlap("day", a[2], b[2], 31)
    else:
        days = _fields_overlap("day", a[2], b[2], 31) or _fields_overlap("day", a[4], b[4], 6)
    return days and _fields_overlap("hour", a[1], b[1], 23)


def overlapping_schedules(specs: list[str]) -> str:
    """Coder's overlap check of a preset's schedules; the error message, or "" when none overlap."""
    for index, first in enumerate(specs):
        for second in specs[index + 1 :]:
            try:
                if schedules_overlap(first, second):
                    return f"schedules overlap: {first} and {second}"
            except ScheduleError as exc:
                return f"invalid schedule: {exc}"
    return ""


def timezone_error(name: str) -> str:
    """Go's time.LoadLocation: "" and "UTC" are UTC, "Local" the machine's zone, the rest IANA names."""
    if name in ("", "UTC", "Local"):
        return ""
    try:
        zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        return f"failed to load timezone {json.dumps(name)}: unknown time zone {name}"
    return ""


_SCHEDULING = ListNestedBlock(
    "scheduling",
    Block(
        attributes=[required("timezone", STRING)],
        block_types=[
            ListNestedBlock(
                "schedule", Block(attributes=[required("cron", STRING), required("instances", NUMBER)]), min_items=1
            )
        ],
    ),
    max_items=1,
)
_PREBUILDS = SetNestedBlock(
    "prebuilds",
    Block(
        attributes=[required("instances", NUMBER)],
        block_types=[
            SetNestedBlock("expiration_policy", Block(attributes=[required("ttl", NUMBER)]), max_items=1),
            _SCHEDULING,
        ],
    ),
    max_items=1,
)


class WorkspacePresetDataSource(CoderDataSource):
    name = "workspace_preset"
    schema_ = schema(
        required("name", STRING),
        optional("description", STRING),
        optional("icon", STRING),
        optional("default", BOOL, False),
        optional("parameters", Map(STRING)),
        computed("id"),
        blocks=(_PREBUILDS,),
    )

    def check_config(self, diags: Diagnostics, config: State) -> None:
        check_not_empty(diags, "name", config.get("name"), ["name"])
        for field, longest in (("description", 128), ("icon", 256)):
            value = config.get(field)
            if isinstance(value, str) and len(value) > longest:
                diags.add_error(
                    f"Invalid coder_workspace_preset {field}",
                    f"expected length of {field} to be in the range (0 - {longest}), got {value}",
                    path=[field],
                )
        icon = config.get("icon")
        check_url(diags, "icon", icon, ["icon"])
        for prebuild in config["prebuilds"]:
            self._check_prebuild(diags, prebuild)

    @staticmethod
    def _check_prebuild(diags: Diagnostics, prebuild: State) -> None:
        summary = "Invalid coder_workspace_preset prebuilds"
        instances = prebuild.get("instances")
        if isinstance(instances, int | float) and instances < 0:
            diags.add_error(summary, f"expected prebuilds.0.instances to be at least (0), got {int(instances)}")
        for policy in prebuild["expiration_policy"]:
            ttl = policy.get("ttl")
            if isinstance(ttl, int | float) and ttl != 0 and not TTL_LIMITS[0] <= ttl <= TTL_LIMITS[1]:
                diags.add_error(
                    summary,
                    f'"prebuilds.0.expiration_policy.0.ttl" must be 0 or between {TTL_LIMITS[0]} and '
                    f"{TTL_LIMITS[1]}, got {int(ttl)}",
                )
        for scheduling in prebuild["scheduling"]:
            timezone = scheduling.get("timezone")
            if isinstance(timezone, str) and timezone_error(timezone):
                diags.add_error(summary, timezone_error(timezone))
            for schedule in scheduling["schedule"]:
                cron = schedule.get("cron")
                if isinstance(cron, str) and check_prebuild_cron(cron):
                    diags.add_error(summary, check_prebuild_cron(cron))

    def compute(self, diags: Diagnostics, state: State) -> State | None:
        state["default"] = bool(state.get("default"))
        # A data source is read with its whole configuration known, its blocks lists (empty when left out).
        for prebuild in state["prebuilds"]:
            for scheduling in prebuild.get("scheduling") or []:
                specs = [str(schedule.get("cron")) for schedule in scheduling.get("schedule") or []]
                overlap = overlapping_schedules(specs)
                if overlap:
                    diags.add_error(
                        "Invalid coder_workspace_preset prebuilds", f"schedules overlap with each other: {overlap}"
                    )
                    return None
        # Coder identifies a preset by its name; the id says so.
        state["id"] = state["name"]
        return state
