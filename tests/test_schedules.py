"""CRON_TZ schedules: what parses (and what is refused, with a reason), and wall-clock times across daylight-saving
changes in a European and a US zone: a skipped time happens at the end of the gap, a repeated time once."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from app.core.schedules import ScheduleError, mask_from_weekdays, parse_schedule, weekdays_from_mask


def utc(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "after", "expected"),
    [
        # Berlin, spring forward 2026-03-29 02:00 CET -> 03:00 CEST: 09:00 is 08:00 UTC before, 07:00 UTC after.
        ("CRON_TZ=Europe/Berlin 0 9 * * *", utc(2026, 3, 28, 9), utc(2026, 3, 29, 7)),
        ("CRON_TZ=Europe/Berlin 0 9 * * *", utc(2026, 3, 27, 9), utc(2026, 3, 28, 8)),
        # The skipped 02:30 happens at 03:00 CEST (01:00 UTC), the end of the gap: that day's start is not lost.
        ("CRON_TZ=Europe/Berlin 30 2 * * *", utc(2026, 3, 28, 12), utc(2026, 3, 29, 1)),
        # Berlin, fall back 2026-10-25 03:00 CEST -> 02:00 CET: 02:30 happens twice; once, the first time.
        ("CRON_TZ=Europe/Berlin 30 2 * * *", utc(2026, 10, 24, 12), utc(2026, 10, 25, 0, 30)),
        ("CRON_TZ=Europe/Berlin 30 2 * * *", utc(2026, 10, 25, 0, 30), utc(2026, 10, 26, 1, 30)),
        # New York, spring forward 2026-03-08 02:00 EST -> 03:00 EDT; 09:00 is 14:00 UTC before, 13:00 UTC after.
        ("CRON_TZ=America/New_York 0 9 * * 1-5", utc(2026, 3, 6, 15), utc(2026, 3, 9, 13)),
        ("CRON_TZ=America/New_York 30 2 * * *", utc(2026, 3, 7, 12), utc(2026, 3, 8, 7)),
        # New York, fall back 2026-11-01 02:00 EDT -> 01:00 EST: 01:30 happens once (05:30 UTC), not at 06:30 too.
        ("CRON_TZ=America/New_York 30 1 * * *", utc(2026, 11, 1, 0), utc(2026, 11, 1, 5, 30)),
        ("CRON_TZ=America/New_York 30 1 * * *", utc(2026, 11, 1, 5, 30), utc(2026, 11, 2, 6, 30)),
    ],
)
def test_next_start_keeps_wall_clock_time_across_dst(text: str, after: datetime, expected: datetime) -> None:
    assert parse_schedule(text).next_after(after) == expected


def test_fields_lists_ranges_steps_and_names() -> None:
    schedule = parse_schedule("CRON_TZ=UTC */30 9-10 * * mon,wed-fri")
    assert schedule.minutes == {0, 30} and schedule.hours == {9, 10}
    assert schedule.weekdays == {0, 2, 3, 4}  # Monday, Wednesday to Friday
    assert schedule.describe() == "09:00, 09:30, 10:00, 10:30 Mon,Wed,Thu,Fri (UTC)"
    assert parse_schedule("CRON_TZ=UTC 0 9 * * 0").weekdays == parse_schedule("CRON_TZ=UTC 0 9 * * 7").weekdays == {6}
    assert parse_schedule("CRON_TZ=UTC 0 9 * * 1-5").previous_at_or_before(utc(2026, 11, 29, 12)) == utc(
        2026, 11, 27, 9
    )


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("0 9 * * *", "starts with CRON_TZ="),
        ("CRON_TZ=Mars/Olympus 0 9 * * *", "Unknown time zone"),
        ("CRON_TZ=../../etc/passwd 0 9 * * *", "Unknown time zone"),
        ("CRON_TZ=UTC 0 9 * *", "five fields"),
        ("CRON_TZ=UTC 0 9 1 * *", "Day of month and month"),
        ("CRON_TZ=UTC 60 9 * * *", "outside 0-59"),
        ("CRON_TZ=UTC 0 24 * * *", "outside 0-23"),
        ("CRON_TZ=UTC 0 9 * * 5-1", "runs backwards"),
        ("CRON_TZ=UTC */0 9 * * *", "Bad step"),
        ("CRON_TZ=UTC 0 ٩ * * *", "not a valid hour"),
        ("CRON_TZ=UTC 0 9 * * funday", "not a valid day of week"),
        ("CRON_TZ=UTC " + "0," * 60 + "0 9 * * *", "at most 128"),
    ],
)
def test_bad_schedules_say_what_is_wrong(text: str, says: str) -> None:
    with pytest.raises(ScheduleError, match=says):
        parse_schedule(text)


def test_quiet_hours_are_one_time_every_day() -> None:
    assert parse_schedule("CRON_TZ=Asia/Tokyo 0 22 * * *", daily_only=True).is_daily
    for text in ("CRON_TZ=UTC 0 22 * * 1-5", "CRON_TZ=UTC 0,30 22 * * *"):
        with pytest.raises(ScheduleError, match="one time every day"):
            parse_schedule(text, daily_only=True)


def test_weekday_masks() -> None:
    assert mask_from_weekdays(["Monday", "sunday"]) == 1 | 64
    assert weekdays_from_mask(1 | 64) == ["monday", "sunday"]
    with pytest.raises(ScheduleError, match="Unknown day"):
        mask_from_weekdays(["funday"])
