"""The reconciler's decisions (app/prebuilds/planning.py): given the state, the actions, case by case."""

from __future__ import annotations

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
    Prebuild,
    PrebuildStatus,
    TemplateState,
    plan,
)

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
