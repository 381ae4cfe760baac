"""A closed app's event relay stops following Redis quietly: apps closed while the process lives on (each test's)
must not each report "lost Redis" when the Redis they shared goes away."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator

import pytest

from app.events.relay import EventRelay

NO_REDIS = "unix:///nonexistent/redis.sock"


class Said(logging.Handler):
    """The relay's warnings, and an event set when the first arrives."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []
        self.first = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())
        self.first.set()


@pytest.fixture
def said() -> Iterator[Said]:
    handler, logger = Said(), logging.getLogger("app.events.relay")
    logger.addHandler(handler)
    yield handler
    logger.removeHandler(handler)


def relay_threads() -> set[threading.Thread]:
    return {thread for thread in threading.enumerate() if thread.name == "event-relay"}


def test_a_closed_relay_ends_without_a_word_about_the_redis_it_lost(said: Said) -> None:
    before = relay_threads()
    relay = EventRelay(NO_REDIS)
    relay.close()
    relay.watch("some-job")  # starts its thread, which finds no Redis
    for thread in relay_threads() - before:
        thread.join(timeout=30)
        assert not thread.is_alive(), "the relay kept following Redis after it was closed"
    assert not any("lost Redis" in line for line in said.lines), said.lines


def test_an_open_relay_says_once_that_it_lost_redis(said: Said) -> None:
    relay = EventRelay(NO_REDIS)
    relay.watch("some-job")
    assert said.first.wait(timeout=30)
    relay.close()
    assert [line for line in said.lines if "lost Redis" in line][:1] == said.lines[:1] and len(said.lines) == 1
