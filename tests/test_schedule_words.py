"""Schedules in words and the day picker's form (app/core/schedule_words.py): pure functions, no database."""

from __future__ import annotations

import pytest
from werkzeug.datastructures import MultiDict

from app.core.schedule_words import (
    FieldError,
    ScheduleForm,
    build,
    cron_days,
    days_words,
    parse_time,
    picked,
    sentence,
    zone_choices,
    zone_groups,
    zone_words,
)
from app.core.schedules import parse_schedule


@pytest.mark.parametrize(
    ("stored", "said"),
    [
        ("CRON_TZ=Europe/Lisbon 0 9 * * mon-fri", "Weekdays at 09:00, Lisbon time"),
        ("CRON_TZ=Europe/Lisbon 0 9 * * 1-5", "Weekdays at 09:00, Lisbon time"),
        ("CRON_TZ=UTC 30 18 * * *", "Every day at 18:30, UTC"),
        ("CRON_TZ=UTC 30 18 * * 0-6", "Every day at 18:30, UTC"),
        ("CRON_TZ=America/New_York 15 7 * * mon,wed,fri", "Mon, Wed and Fri at 07:15, New York time"),
        ("CRON_TZ=America/New_York 15 7 * * 5,3,1", "Mon, Wed and Fri at 07:15, New York time"),
        ("CRON_TZ=Asia/Tokyo 0 10 * * sat,sun", "Weekends at 10:00, Tokyo time"),
        ("CRON_TZ=Asia/Tokyo 0 10 * * 0,6", "Weekends at 10:00, Tokyo time"),
        ("CRON_TZ=Asia/Tokyo 0 10 * * 7", "Sundays at 10:00, Tokyo time"),
        ("CRON_TZ=Europe/Berlin 5 0 * * tue", "Tuesdays at 00:05, Berlin time"),
        ("CRON_TZ=Europe/Berlin 59 23 * * mon,tue", "Mon and Tue at 23:59, Berlin time"),
        ("CRON_TZ=Europe/Berlin 0 8 * * mon-sat", "Mon, Tue, Wed, Thu, Fri and Sat at 08:00, Berlin time"),
        ("CRON_TZ=America/Argentina/Buenos_Aires 0 9 * * *", "Every day at 09:00, Buenos Aires time"),
        ("CRON_TZ=Etc/GMT+5 0 6 * * *", "Every day at 06:00, GMT+5"),
        ("CRON_TZ=Europe/Lisbon */15 9-17 * * 1-5", "*/15 9-17 * * 1-5 (custom), Lisbon time"),
        ("CRON_TZ=UTC 0 9,17 * * *", "0 9,17 * * * (custom), UTC"),
        ("CRON_TZ=UTC 0,30  9 * * *", "0,30 9 * * * (custom), UTC"),
        ("0 9 * * *", "0 9 * * * (custom)"),
        ("", ""),
        (None, ""),
    ],
)
def test_a_schedule_is_said_as_a_sentence(stored: str | None, said: str) -> None:
    assert sentence(stored) == said


def test_words_for_days_and_zones() -> None:
    assert days_words({0, 1, 2, 3, 4}) == "Weekdays"
    assert days_words(range(7)) == "Every day"
    assert days_words({4}) == "Fridays"
    assert days_words({6, 0}) == "Mon and Sun"
    assert zone_words("UTC") == "UTC" and zone_words("EST") == "EST"
    assert zone_words("Europe/Isle_of_Man") == "Isle of Man time"


@pytest.mark.parametrize(
    ("days", "field"),
    [
        ({0, 1, 2, 3, 4}, "mon-fri"),
        (set(range(7)), "*"),
        ({5, 6}, "sat,sun"),
        ({4, 5, 6}, "fri,sat,sun"),
        ({0, 1, 2, 3, 4, 5}, "mon-sat"),
        ({0, 2, 4}, "mon,wed,fri"),
        ({6}, "sun"),
        ({0, 1, 2, 4, 5, 6}, "mon-wed,fri,sat,sun"),
    ],
)
def test_the_picker_builds_cron_that_reads_back_as_the_same_days(days: set[int], field: str) -> None:
    assert cron_days(days) == field
    built = build("Europe/Lisbon", [("mon", "tue", "wed", "thu", "fri", "sat", "sun")[day] for day in days], "07:05")
    assert built == f"CRON_TZ=Europe/Lisbon 5 7 * * {field}"
    choice = picked(built)
    assert choice is not None and choice.days == frozenset(days) and choice.time == "07:05"
    assert parse_schedule(built).weekdays == frozenset(days)


def test_building_names_the_wrong_field() -> None:
    with pytest.raises(FieldError) as zone:
        build("Mars/Olympus", ["mon"], "09:00")
    assert zone.value.field == "zone" and "Unknown time zone" in str(zone.value)
    with pytest.raises(FieldError) as days:
        build("UTC", [], "09:00")
    assert days.value.field == "days"
    for bad in ("9", "24:00", "09:60", "9:30", "٠٩:٣٠", "09:30pm", ""):
        with pytest.raises(FieldError) as time:
            parse_time(bad)
        assert time.value.field == "start_time"
    assert parse_time("09:30") == (9, 30) and parse_time("23:59:00") == (23, 59)


def test_the_form_opens_in_the_picker_when_it_can_and_in_cron_otherwise() -> None:
    form = ScheduleForm.of("CRON_TZ=Europe/Lisbon 0 9 * * 1,3")
    assert (form.zone, form.days, form.time, form.cron, form.zone_saved) == (
        "Europe/Lisbon",
        ("mon", "wed"),
        "09:00",
        "",
        True,
    )
    custom = ScheduleForm.of("CRON_TZ=Europe/Lisbon */15 9-17 * * 1-5")
    assert (custom.zone, custom.time, custom.cron) == ("Europe/Lisbon", "", "*/15 9-17 * * 1-5")
    assert ScheduleForm.of(custom.schedule()) == custom
    assert ScheduleForm.of(None) == ScheduleForm() and not ScheduleForm().zone_saved
    assert ScheduleForm().schedule() is None


def test_a_posted_form_gives_its_schedule_or_the_field_that_is_wrong() -> None:
    posted = MultiDict([("zone", "Asia/Tokyo"), ("day", "sat"), ("day", "sun"), ("start_time", "10:00")])
    assert ScheduleForm.posted(posted).checked() == "CRON_TZ=Asia/Tokyo 0 10 * * sat,sun"
    # The cron field, when filled in, wins; the zone is the select's unless it says its own.
    with_cron = MultiDict([*posted.items(multi=True), ("cron", "*/30 9-17 * * 1-5")])
    assert ScheduleForm.posted(with_cron).checked() == "CRON_TZ=Asia/Tokyo */30 9-17 * * 1-5"
    whole = MultiDict([("zone", "Asia/Tokyo"), ("cron", "CRON_TZ=UTC 0 1 * * *")])
    assert ScheduleForm.posted(whole).checked() == "CRON_TZ=UTC 0 1 * * *"
    bad_cron = MultiDict([("zone", "UTC"), ("cron", "0 25 * * *")])
    with pytest.raises(FieldError) as error:
        ScheduleForm.posted(bad_cron).checked()
    assert error.value.field == "cron"
    # Quiet hours: every day, one time; a cron for some days only is refused on the cron field.
    quiet = MultiDict([("zone", "Europe/Paris"), ("start_time", "22:30")])
    assert ScheduleForm.posted(quiet, every_day=True).checked(daily_only=True) == "CRON_TZ=Europe/Paris 30 22 * * *"
    weekdays_only = MultiDict([("zone", "UTC"), ("cron", "0 22 * * 1-5")])
    with pytest.raises(FieldError) as daily:
        ScheduleForm.posted(weekdays_only, every_day=True).checked(daily_only=True)
    assert daily.value.field == "cron" and "every day" in str(daily.value)
    assert ScheduleForm.posted(MultiDict([("zone", "")])).zone == "UTC"


def test_zone_choices_start_with_utc_then_regions_in_order() -> None:
    zones = zone_choices()
    assert zones[0] == "UTC" and zones.count("UTC") == 1 and "localtime" not in zones
    regional = [zone for zone in zones if "/" in zone and not zone.startswith("Etc/")]
    assert regional == sorted(regional) and zones.index("Europe/Lisbon") < zones.index("EST")


def test_zone_groups_are_the_choices_by_region() -> None:
    groups = zone_groups()
    assert groups[0] == ("", ["UTC"]) and groups[-1][0] == "Other" and "EST" in groups[-1][1]
    assert [zone for _, names in groups for zone in names] == zone_choices()
    regions = [region for region, _ in groups]
    assert len(regions) == len(set(regions)) and "Europe" in regions
    assert "Europe/Lisbon" in dict(groups)["Europe"]
