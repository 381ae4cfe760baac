"""A live page's stream compares its first read with what the page showed (``?seen=``), so that a change made
between the page's render and the stream's connection is not missed."""

from __future__ import annotations

from app.events.streams import seen_token, stale_readers


def test_a_page_that_shows_the_current_state_is_not_refreshed() -> None:
    state = {"refresh": (3, "running"), "agents": {"a1": ("connected", "ready")}}
    assert stale_readers(state, seen_token(dict(state))) == []


def test_only_the_readers_whose_state_moved_on_are_refreshed() -> None:
    shown = {"refresh": (3, "running"), "agents": {"a1": ("connecting", "created")}}
    now = {"refresh": (3, "running"), "agents": {"a1": ("connected", "ready")}}
    assert stale_readers(now, seen_token(shown)) == ["agents"]
    assert stale_readers({"refresh": [("w1", 2, "stopped")]}, seen_token({"refresh": []})) == ["refresh"]


def test_a_token_that_is_not_one_refreshes_everything() -> None:
    now = {"refresh": (1, "pending"), "agents": {}}
    for token in ("", "nonsense", "refresh", "refresh-.agents-", "x" * 500):
        assert stale_readers(now, token) == ["agents", "refresh"]
