"""The workspace page redraws an agent's panel when its live state changes: a metadata report that repeats the
shown value (only its collection time is new) must not change that state; a new value or error must."""

from __future__ import annotations

from app.agents.views import _shown_metadata


def result(value: str, collected_at: str, error: str = "") -> dict[str, str]:
    return {"value": value, "error": error, "collected_at": collected_at}


def test_a_repeated_value_does_not_redraw_the_panel() -> None:
    first = _shown_metadata({"disk": result("12M", "2026-11-28T22:00:00Z")})
    again = _shown_metadata({"disk": result("12M", "2026-11-28T22:00:30Z")})
    assert first == again


def test_a_new_value_an_error_or_a_first_result_redraws_it() -> None:
    before = _shown_metadata({"disk": result("12M", "2026-11-28T22:00:00Z")})
    assert _shown_metadata({"disk": result("13M", "2026-11-28T22:00:30Z")}) != before
    assert _shown_metadata({"disk": result("", "2026-11-28T22:00:30Z", error="timed out")}) != before
    assert _shown_metadata({}) != before
    assert _shown_metadata({"disk": result("", "")}) != _shown_metadata({"disk": result("", "2026-11-28T22:00:00Z")})
