"""Cron schedules as Coder's agent reads them: six fields, seconds first, the day of the week optional."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta

import pytest

from agent.cron import run_on_schedule
from protocol.cron import CronError, CronSchedule, IntervalSchedule, parse_field, parse_schedule, unix_format_warning
from tests.agent.support import run


def test_fields_accept_stars_numbers_ranges_lists_and_steps() -> None:
    assert parse_field("*", "minute", 0, 59) == frozenset(range(60))
    assert parse_field("5", "minute", 0, 59) == {5}
    assert parse_field("1-4", "hour", 0, 23) == {1, 2, 3, 4}
    assert parse_field("1,3,20-22", "hour", 0, 23) == {1, 3, 20, 21, 22}
    assert parse_field("*/15", "minute", 0, 59) == {0, 15, 30, 45}
    assert parse_field("10-20/5", "second", 0, 59) == {10, 15, 20}
    assert parse_field("50/5", "second", 0, 59) == {50, 55}


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("* * * *", "six"),
        ("0 0 0 0 0 0 0", "six"),
        ("60 * * * * *", "second: 60 is outside 0-59"),
        ("* * 24 * * *", "hour: 24 is outside 0-23"),
        ("* * * 0 * *", "day of month: 0 is outside 1-31"),
        ("* * * * 13 *", "month: 13 is outside 1-12"),
        ("* * * * * 8", "day of week: 8 is outside 0-7"),
        ("* * * * * MOON", "not a number"),
        ("* 5-1 * * * *", "backwards"),
        ("* */0 * * * *", "minute: 0 is outside"),
        ("* 1,,2 * * * *", "not a number"),
    ],
)
def test_malformed_expressions_say_what_is_wrong(expression: str, message: str) -> None:
    with pytest.raises(CronError, match=message):
        CronSchedule.parse(expression)


def test_every_five_minutes() -> None:
    schedule = CronSchedule.parse("0 */5 * * * *")
    assert schedule.next_after(datetime(2026, 3, 1, 10, 2, 30)) == datetime(2026, 3, 1, 10, 5, 0)
    assert schedule.next_after(datetime(2026, 3, 1, 10, 5, 0)) == datetime(2026, 3, 1, 10, 10, 0)
    assert schedule.next_after(datetime(2026, 12, 31, 23, 59, 59)) == datetime(2027, 1, 1, 0, 0, 0)


def test_every_second_and_seconds_lists() -> None:
    assert CronSchedule.parse("* * * * * *").next_after(datetime(2026, 1, 1, 0, 0, 0, 500)) == datetime(
        2026, 1, 1, 0, 0, 1
    )
    schedule = CronSchedule.parse("15,45 * * * * *")
    assert schedule.next_after(datetime(2026, 1, 1, 0, 0, 20)) == datetime(2026, 1, 1, 0, 0, 45)


def test_day_of_week_with_seven_as_sunday() -> None:
    # 2026-03-01 is a Sunday.
    sunday_noon = CronSchedule.parse("0 0 12 * * 7")
    assert sunday_noon.next_after(datetime(2026, 3, 2, 0, 0, 0)) == datetime(2026, 3, 8, 12, 0, 0)
    assert CronSchedule.parse("0 0 12 * * 0") == sunday_noon
    weekdays = CronSchedule.parse("0 30 9 * * 1-5")
    assert weekdays.next_after(datetime(2026, 3, 6, 10, 0, 0)) == datetime(2026, 3, 9, 9, 30, 0)


def test_restricted_day_of_month_and_week_match_either() -> None:
    # The 13th, or any Friday (Vixie cron's rule); 2026-03-06 is a Friday.
    schedule = CronSchedule.parse("0 0 0 13 * 5")
    assert schedule.next_after(datetime(2026, 3, 1)) == datetime(2026, 3, 6)
    assert schedule.next_after(datetime(2026, 3, 10)) == datetime(2026, 3, 13)


def test_month_and_leap_day() -> None:
    schedule = CronSchedule.parse("0 0 0 29 2 *")
    assert schedule.next_after(datetime(2026, 1, 1)) == datetime(2028, 2, 29)


def test_an_impossible_date_is_an_error() -> None:
    with pytest.raises(CronError, match="never matches"):
        CronSchedule.parse("0 0 0 31 2 *").next_after(datetime(2026, 1, 1))


def test_runs_once_per_matching_second() -> None:
    runs: list[datetime] = []

    async def scenario() -> None:
        async def job() -> None:
            runs.append(datetime.now())

        task = asyncio.create_task(run_on_schedule(CronSchedule.parse("* * * * * *"), job))
        await asyncio.sleep(2.6)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    run(scenario())
    assert 2 <= len(runs) <= 3
    assert len({moment.replace(microsecond=0) for moment in runs}) == len(runs)


def test_coders_grammar_five_fields_names_question_marks_and_descriptors() -> None:
    # Five fields are six without the day of the week, still seconds first: minute 22 of every hour.
    assert CronSchedule.parse("0 22 * * *") == CronSchedule.parse("0 22 * * * *")
    assert CronSchedule.parse("0 30 9 ? JAN-mar MON-FRI") == CronSchedule.parse("0 30 9 * 1-3 1-5")
    assert CronSchedule.parse("@daily") == CronSchedule.parse("@midnight") == CronSchedule.parse("0 0 0 * * *")
    assert CronSchedule.parse("@weekly").next_after(datetime(2026, 3, 4, 12)) == datetime(2026, 3, 8)
    assert parse_schedule("@hourly").next_after(datetime(2026, 3, 4, 12, 5)) == datetime(2026, 3, 4, 13)
    every = parse_schedule("@every 1h30m")
    assert every == IntervalSchedule(timedelta(minutes=90))
    assert every.next_after(datetime(2026, 3, 4, 12, 0, 0, 700)) == datetime(2026, 3, 4, 13, 30)
    assert parse_schedule("@every 1500ms") == IntervalSchedule(timedelta(seconds=1))
    with pytest.raises(CronError, match="not a duration"):
        parse_schedule("@every soon")


def test_a_unix_style_expression_gets_coders_warning_and_a_six_field_one_none() -> None:
    warning = unix_format_warning("0 22 * * *")
    assert "appears to be in Unix 5-field format" in warning and "'0 0 22 * * *'" in warning
    assert unix_format_warning("0 0 22 * * *") == unix_format_warning("61 * * * *") == ""
