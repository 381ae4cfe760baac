"""Schedules in people's words, and the day picker's form: the stored form stays Coder's
``CRON_TZ=<zone> <minute> <hour> * * <days>`` (app/core/schedules.py); people pick a zone, days and a time, and
read the schedule back as a sentence ("Weekdays at 09:00, Lisbon time"). A schedule the picker cannot express
(several times a day, steps) stays cron, shown as the cron with "(custom)"."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from werkzeug.datastructures import MultiDict

from app.core.schedules import DAY_NAMES, ScheduleError, parse_schedule, parse_zone, zone_names

# The picker's days in the order a week is read (Python weekdays: 0 = Monday … 6 = Sunday).
PICKER_DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
_SHORT = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_PLURAL = ("Mondays", "Tuesdays", "Wednesdays", "Thursdays", "Fridays", "Saturdays", "Sundays")
WEEKDAYS = frozenset(range(5))
WEEKEND = frozenset({5, 6})
EVERY_DAY = frozenset(range(7))
DEFAULT_ZONE = "UTC"
# Files of some systems' zone database that are no one's zone (still accepted where typed, never offered).
_NOT_PLACES = frozenset({"localtime", "posixrules", "Factory"})


@dataclass(frozen=True)
class PickedSchedule:
    """What the picker shows for a schedule: a zone, the days (Python weekdays) and one time ``HH:MM``."""

    zone: str
    days: frozenset[int]
    time: str


def zone_choices() -> list[str]:
    """The time zone select's options: UTC first, then the IANA names in alphabetical order (they read as
    Region/City, so a city is found under its region); the legacy aliases without a region come last."""
    names = zone_names() - {DEFAULT_ZONE} - _NOT_PLACES
    regional = sorted(name for name in names if "/" in name and not name.startswith("Etc/"))
    other = sorted(names - set(regional))
    return [DEFAULT_ZONE, *regional, *other]


def zone_groups() -> list[tuple[str, list[str]]]:
    """:func:`zone_choices` as the select's groups: UTC on its own, then one group per region (Africa, America…),
    the zones without a region last as "Other"."""
    groups: list[tuple[str, list[str]]] = [("", [DEFAULT_ZONE])]
    for zone in zone_choices()[1:]:
        region = zone.split("/", 1)[0] if "/" in zone and not zone.startswith("Etc/") else "Other"
        if groups[-1][0] != region:
            groups.append((region, []))
        groups[-1][1].append(zone)
    return groups


def zone_words(zone: str) -> str:
    """``Europe/Lisbon`` → "Lisbon time", ``America/Argentina/Buenos_Aires`` → "Buenos Aires time"; a zone
    without a place (UTC, Etc/GMT+5, EST) is said as its name."""
    if "/" not in zone or zone.startswith("Etc/"):
        return zone.removeprefix("Etc/")
    return zone.rsplit("/", 1)[1].replace("_", " ") + " time"


def days_words(days: Iterable[int]) -> str:
    """Python weekdays in words: "Every day", "Weekdays", "Weekends", "Mondays", "Mon, Wed and Fri"."""
    chosen = frozenset(days)
    if chosen == EVERY_DAY:
        return "Every day"
    if chosen == WEEKDAYS:
        return "Weekdays"
    if chosen == WEEKEND:
        return "Weekends"
    ordered = sorted(chosen)
    if len(ordered) == 1:
        return _PLURAL[ordered[0]]
    names = [_SHORT[day] for day in ordered]
    return f"{', '.join(names[:-1])} and {names[-1]}"


def picked(text: str | None) -> PickedSchedule | None:
    """The picker's reading of a stored schedule, or None when it cannot express it (or there is none)."""
    if not text:
        return None
    try:
        schedule = parse_schedule(text)
    except ScheduleError:
        return None
    if len(schedule.hours) != 1 or len(schedule.minutes) != 1:
        return None
    (hour,), (minute,) = schedule.hours, schedule.minutes
    return PickedSchedule(zone=schedule.zone.key, days=schedule.weekdays, time=f"{hour:02d}:{minute:02d}")


def sentence(text: str | None) -> str:
    """The one way a schedule is shown to people: "Weekdays at 09:00, Lisbon time"; a schedule the picker cannot
    express is its cron and zone with "(custom)"; none is "" (the caller says what no schedule means)."""
    if not text:
        return ""
    choice = picked(text)
    if choice is not None:
        return f"{days_words(choice.days)} at {choice.time}, {zone_words(choice.zone)}"
    zone, _, cron = text.strip().partition(" ")
    if not zone.startswith("CRON_TZ="):
        return f"{text.strip()} (custom)"
    return f"{' '.join(cron.split())} (custom), {zone_words(zone.removeprefix('CRON_TZ='))}"


def build(zone: str, days: Iterable[str], at: str) -> str:
    """The stored schedule of the picker's zone, days (``mon`` … ``sun``) and time ``HH:MM``; raise
    :class:`FieldError` naming the field that is wrong."""
    try:
        parse_zone(zone)
    except ScheduleError as exc:
        raise FieldError("zone", str(exc)) from None
    hour, minute = parse_time(at)
    chosen = {PICKER_DAYS.index(day) for day in days if day in PICKER_DAYS}
    if not chosen:
        raise FieldError("days", "Pick at least one day.")
    return f"CRON_TZ={zone} {minute} {hour} * * {cron_days(chosen)}"


def parse_time(at: str) -> tuple[int, int]:
    """``HH:MM`` (what ``<input type=time>`` sends; seconds, if a browser adds them, are dropped)."""
    parts = at.strip().split(":")
    if len(parts) in (2, 3) and all(part.isdecimal() and part.isascii() and len(part) == 2 for part in parts):
        hour, minute = int(parts[0]), int(parts[1])
        if hour < 24 and minute < 60:
            return hour, minute
    raise FieldError("start_time", "Give the time as HH:MM, e.g. 09:30.")


def cron_days(days: Iterable[int]) -> str:
    """Python weekdays as cron's day-of-week field: ``*``, ``mon-fri``, ``mon,wed,fri``, ``sat,sun``. Runs of
    three or more become ranges; Sunday (cron's 0) is never inside a range, which would run backwards."""
    chosen = sorted(set(days))
    if set(chosen) == EVERY_DAY:
        return "*"
    parts: list[str] = []
    run: list[int] = []
    for day in [*chosen, -1]:
        if run and (day != run[-1] + 1 or day == 6):
            parts.append(_run(run))
            run = []
        if day >= 0:
            run.append(day)
    return ",".join(parts)


def _run(run: list[int]) -> str:
    names = [DAY_NAMES[(day + 1) % 7] for day in run]
    return f"{names[0]}-{names[-1]}" if len(names) >= 3 else ",".join(names)


def with_zone(zone: str, cron: str) -> str:
    """The advanced field's cron: five fields (the zone from the select), or a whole ``CRON_TZ=…`` schedule."""
    cron = cron.strip()
    if cron.startswith("CRON_TZ="):
        return cron
    try:
        parse_zone(zone)
    except ScheduleError as exc:
        raise FieldError("zone", str(exc)) from None
    return f"CRON_TZ={zone} {cron}"


@dataclass(frozen=True)
class ScheduleForm:
    """A schedule form's fields as shown, filled in from the stored schedule or kept from a refused post.
    ``zone_saved`` tells the page's script not to replace the zone with the browser's."""

    zone: str = DEFAULT_ZONE
    days: tuple[str, ...] = PICKER_DAYS[:5]
    time: str = ""
    cron: str = ""
    zone_saved: bool = False

    @classmethod
    def of(cls, stored: str | None) -> ScheduleForm:
        """The form for a stored schedule: in the picker where it can express it, else in the cron field."""
        choice = picked(stored)
        if choice is not None:
            days = tuple(PICKER_DAYS[day] for day in sorted(choice.days))
            return cls(zone=choice.zone, days=days, time=choice.time, zone_saved=True)
        if not stored:
            return cls()
        zone, _, cron = stored.strip().partition(" ")
        return cls(zone=zone.removeprefix("CRON_TZ="), cron=" ".join(cron.split()), zone_saved=True)

    @classmethod
    def posted(cls, form: MultiDict[str, str], *, every_day: bool = False) -> ScheduleForm:
        """A posted form as it was sent (kept as it is when refused); ``every_day`` for quiet hours (no days)."""
        return cls(
            zone=form.get("zone", "").strip() or DEFAULT_ZONE,
            days=PICKER_DAYS if every_day else tuple(form.getlist("day")),
            time=form.get("start_time", "").strip(),
            cron=form.get("cron", "").strip(),
            zone_saved=True,
        )

    def checked(self, *, daily_only: bool = False) -> str | None:
        """:meth:`schedule`, parsed as it will be stored: raise :class:`FieldError` naming the wrong field."""
        text = self.schedule()
        if text is not None:
            try:
                parse_schedule(text, daily_only=daily_only)
            except ScheduleError as error:
                raise FieldError("cron" if self.cron.strip() else "start_time", str(error)) from None
        return text

    def schedule(self) -> str | None:
        """The schedule to store (None: none, with neither a time nor a cron); raise :class:`FieldError`. The
        cron field, when filled in, is used instead of the picker: it is for what the picker cannot say."""
        if self.cron.strip():
            return with_zone(self.zone, self.cron)
        if not self.time.strip():
            return None
        return build(self.zone, self.days, self.time)


class FieldError(ValueError):
    """A schedule form's field that is wrong: ``field`` is the form's field name, the message is for people."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
