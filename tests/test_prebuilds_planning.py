"""The reconciler's decisions (app/prebuilds/planning.py): given the state, the actions, case by case."""

from __future__ import annotations

import zoneinfo
from datetime import UTC, datetime, timedelta

import pytest

from app.prebuilds.planning import (
    BUILDING,
    DELETING,
    FAILED,
    READY,
    RUNNING,
    STOPPED,
    Failures,
    PoolPolicy,
    Prebuild,
    PrebuildStatus,
    TemplateState,
    desired_instances,
    plan,
)
from protocol.provisionerd import PrebuildSchedule, PrebuildScheduling

NOW = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)
BASE, MAXIMUM = timedelta(seconds=30), timedelta(minutes=10)


def _pb(ident: str, status: PrebuildStatus, *, version: str = "v2", preset: str = "small", age: int = 0) -> Prebuild:
    return Prebuild(ident, version, preset, status, NOW - timedelta(minutes=age))


def _actions(state: TemplateState, *, cap: int = 10) -> list[tuple[str, str | None]]:
    result = plan([state], NOW, max_in_flight=cap, backoff_base=BASE, backoff_max=MAXIMUM)
    return [(a.kind, a.workspace_id if a.kind == "delete" else a.preset_name) for a in result.actions]


CASES = [
    pytest.param({"small": 2}, [], {}, 10, [("create", "small")] * 2, id="empty pool fills"),
    pytest.param({"small": 2}, [_pb("a", READY), _pb("b", BUILDING)], {}, 10, [], id="building counts as live"),
    pytest.param({"small": 0}, [_pb("a", READY)], {}, 10, [("delete", "a")], id="zero instances deletes"),
    pytest.param(
        {"small": 1},
        [_pb("old", READY, age=9), _pb("new", READY, age=1), _pb("b", BUILDING), _pb("r", RUNNING)],
        {},
        10,
        [("delete", "b"), ("delete", "r"), ("delete", "old")],
        id="shrinking deletes not-ready first then oldest",
    ),  # fmt: skip
    pytest.param(
        {"small": 2},
        [_pb("o1", READY, version="v1"), _pb("o2", READY, version="v1")],
        {},
        1,
        [("create", "small")],
        id="new version replaces gradually: fill first within the cap",
    ),  # fmt: skip
    pytest.param(
        {"small": 2},
        [_pb("o1", READY, version="v1"), _pb("n1", READY), _pb("n2", BUILDING)],
        {},
        2,
        [("delete", "o1")],
        id="old version deleted once the cap allows",
    ),  # fmt: skip
    pytest.param(
        {"small": 1},
        [_pb("x", BUILDING), _pb("y", DELETING, preset="gone")],
        {},
        2,
        [],
        id="in-flight builds use the cap",
    ),
    pytest.param(
        {"small": 1}, [_pb("f", FAILED)], {}, 10, [("create", "small"), ("delete", "f")], id="failed replaced"
    ),
    pytest.param(
        {"small": 1}, [_pb("s", STOPPED)], {}, 10, [("create", "small"), ("delete", "s")], id="stopped replaced"
    ),
    pytest.param(
        {"small": 3}, [], {"small": Failures(1, NOW - timedelta(seconds=10))}, 10, [], id="backing off after a failure"
    ),
    pytest.param(
        {"small": 3},
        [],
        {"small": Failures(1, NOW - timedelta(seconds=31))},
        10,
        [("create", "small")],
        id="one try after the backoff, not a pool's worth",
    ),  # fmt: skip
    pytest.param(
        {"small": 3},
        [],
        {"small": Failures(3, NOW - timedelta(seconds=100))},
        10,
        [],
        id="backoff doubles (3 failures: 120 s)",
    ),  # fmt: skip
    pytest.param(
        {"small": 3},
        [],
        {"small": Failures(40, NOW - timedelta(minutes=11))},
        10,
        [("create", "small")],
        id="backoff is capped",
    ),  # fmt: skip
    pytest.param(
        {"small": 1},
        [_pb("o", READY, preset="other")],
        {},
        10,
        [("create", "small"), ("delete", "o")],
        id="a preset that is gone",
    ),  # fmt: skip
]


@pytest.mark.parametrize(("desired", "prebuilds", "failures", "cap", "expected"), CASES)
def test_plan(
    desired: dict[str, int],
    prebuilds: list[Prebuild],
    failures: dict[str, Failures],
    cap: int,
    expected: list[tuple[str, str | None]],
) -> None:
    state = TemplateState("t", "v2", desired, prebuilds, failures)
    assert _actions(state, cap=cap) == expected


def test_a_template_without_an_active_version_deletes_its_prebuilds() -> None:
    state = TemplateState("t", None, {"small": 2}, [_pb("a", READY)])
    assert _actions(state) == [("delete", "a")]


def test_pools_summarise_for_the_template_page() -> None:
    failures = {"big": Failures(2, NOW - timedelta(seconds=5), "terraform apply failed")}
    state = TemplateState(
        "t", "v2", {"small": 2, "big": 1}, [_pb("a", READY), _pb("b", RUNNING), _pb("c", BUILDING)], failures
    )
    pools = {
        p.preset_name: p for p in plan([state], NOW, max_in_flight=5, backoff_base=BASE, backoff_max=MAXIMUM).pools
    }
    assert (pools["small"].desired, pools["small"].running, pools["small"].ready, pools["small"].building) == (
        2,
        2,
        1,
        1,
    )
    assert pools["big"].failures == 2
    assert pools["big"].backoff_until == NOW - timedelta(seconds=5) + 2 * BASE
    assert pools["big"].failure_reason == "terraform apply failed"


# --- expiration_policy.ttl: replace, a new one first ---------------------------------------------------------------

TTL = {"small": PoolPolicy(ttl=timedelta(hours=1))}

TTL_CASES = [
    pytest.param(
        [_pb("old", READY, age=61), _pb("new", READY, age=5)],
        [("create", "small")],
        id="an expired prebuild stays until its replacement is ready",
    ),
    pytest.param(
        [_pb("old", READY, age=61), _pb("new", READY, age=5), _pb("next", BUILDING)],
        [],
        id="its replacement building: still kept",
    ),
    pytest.param(
        [_pb("old", READY, age=61), _pb("new", READY, age=5), _pb("next", READY)],
        [("delete", "old")],
        id="its replacement ready: deleted",
    ),
    pytest.param(
        [_pb("o1", READY, age=90), _pb("o2", READY, age=70), _pb("o3", READY, age=65)],
        [("create", "small"), ("create", "small"), ("delete", "o1")],
        id="more expired than the target: the oldest beyond it goes at once",
    ),
    pytest.param(
        [_pb("stuck", RUNNING, age=61), _pb("a", READY, age=5)],
        [("create", "small"), ("delete", "stuck")],
        id="an expired one never ready serves nobody: deleted at once",
    ),
    pytest.param(
        [_pb("a", READY, age=59), _pb("b", READY, age=1)], [], id="younger than the ttl: nothing",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("prebuilds", "expected"), TTL_CASES)
def test_an_expired_prebuild_is_replaced_without_the_pool_dropping_below_its_target(
    prebuilds: list[Prebuild], expected: list[tuple[str, str | None]]
) -> None:
    state = TemplateState("t", "v2", {"small": 2}, prebuilds, policies=TTL)
    assert _actions(state) == expected


def test_an_expired_prebuild_stays_while_its_replacement_waits_out_a_backoff() -> None:
    failures = {"small": Failures(1, NOW - timedelta(seconds=5), "boom")}
    state = TemplateState("t", "v2", {"small": 1}, [_pb("old", READY, age=61)], failures, policies=TTL)
    assert _actions(state) == []
    (pool,) = plan([state], NOW, max_in_flight=5, backoff_base=BASE, backoff_max=MAXIMUM).pools
    assert (pool.ready, pool.expired) == (1, 1)


# --- scheduling: the count by time of day ---------------------------------------------------------------------------

OFFICE = PrebuildScheduling(
    timezone="Europe/Berlin",
    schedules=(
        PrebuildSchedule(cron="* 8-18 * * 1-5", instances=5),
        PrebuildSchedule(cron="* 8-12 * * 6", instances=1),
    ),
)


def _berlin(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=zoneinfo.ZoneInfo("Europe/Berlin"))


@pytest.mark.parametrize(
    ("moment", "expected"),
    [
        pytest.param(_berlin("2026-11-30T08:00"), 5, id="Monday 8:00 Berlin: the first schedule"),
        pytest.param(_berlin("2026-11-30T18:59"), 5, id="Monday 18:59: still in hour 18"),
        pytest.param(_berlin("2026-11-30T19:00"), 2, id="Monday 19:00: no schedule, the base"),
        pytest.param(_berlin("2026-11-28T09:30"), 1, id="Saturday morning: the second schedule"),
        pytest.param(_berlin("2026-11-29T09:30"), 2, id="Sunday: the base"),
        pytest.param(datetime(2026, 11, 30, 7, 30, tzinfo=UTC), 5, id="07:30 UTC is 08:30 in Berlin (winter)"),
        pytest.param(datetime(2026, 6, 1, 6, 30, tzinfo=UTC), 5, id="06:30 UTC is 08:30 in Berlin (summer)"),
        pytest.param(datetime(2026, 6, 1, 5, 30, tzinfo=UTC), 2, id="05:30 UTC is 07:30 in Berlin (summer)"),
    ],
)
def test_the_schedule_in_force_sets_the_target(moment: datetime, expected: int) -> None:
    assert desired_instances(2, OFFICE, moment) == expected


def test_schedules_follow_the_wall_clock_across_daylight_saving_changes() -> None:
    night = PrebuildScheduling(timezone="Europe/Berlin", schedules=(PrebuildSchedule(cron="* 2 * * *", instances=4),))
    # 29 March 2026: 02:00 does not exist in Berlin (01:59 CET is followed by 03:00 CEST).
    spring = [
        desired_instances(1, night, datetime(2026, 3, 29, 0, 0, tzinfo=UTC) + timedelta(minutes=m))
        for m in range(0, 180, 30)
    ]
    assert spring == [1] * 6
    # 25 October 2026: 02:00-02:59 happens twice (CEST, then CET), from 00:00 to 01:59 UTC.
    autumn = [
        desired_instances(1, night, datetime(2026, 10, 24, 23, 30, tzinfo=UTC) + timedelta(minutes=m))
        for m in range(0, 180, 30)
    ]
    assert autumn == [1, 4, 4, 4, 4, 1]


def test_a_schedule_raises_a_pool_from_zero_and_its_end_shrinks_it() -> None:
    policies = {"small": PoolPolicy(scheduling=OFFICE)}
    monday = _berlin("2026-11-30T10:00")
    state = TemplateState("t", "v2", {"small": 0}, [], policies=policies)
    result = plan([state], monday, max_in_flight=10, backoff_base=BASE, backoff_max=MAXIMUM)
    assert [a.kind for a in result.actions] == ["create"] * 5 and result.pools[0].desired == 5
    evening = _berlin("2026-11-30T20:00")
    full = TemplateState("t", "v2", {"small": 0}, [_pb(str(i), READY) for i in range(5)], policies=policies)
    after = plan([full], evening, max_in_flight=10, backoff_base=BASE, backoff_max=MAXIMUM)
    assert [a.kind for a in after.actions] == ["delete"] * 5 and after.pools == []


def test_a_schedule_the_import_would_refuse_never_matches() -> None:
    stored = PrebuildScheduling(timezone="Nowhere/Else", schedules=(PrebuildSchedule(cron="* 99 * * *", instances=9),))
    assert desired_instances(3, stored, NOW) == 3
