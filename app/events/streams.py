"""The loops behind every live page and stream: lines of a job or agent as they are stored, and "something
changed" events for status pages. Each loop holds no database connection while it waits."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Protocol, TypeVar

from app.core.extensions import db
from app.core.limits import resumed_stream
from app.events.relay import ANY_JOB, HEARTBEAT_SECONDS, EventRelay, Fetch, Line
from app.events.sse import HEARTBEAT, STREAM_PREAMBLE, sse_event

# A status page checks for changes at most this often, however many log batches wake it.
STATUS_CHECK_SECONDS = 0.5


S = TypeVar("S")
L = TypeVar("L", bound=Line)
S_contra = TypeVar("S_contra", contravariant=True)
L_contra = TypeVar("L_contra", bound=Line, contravariant=True)


class StreamRenderer(Protocol[S_contra, L_contra]):
    def update(self, subject: S_contra, lines: Sequence[L_contra]) -> Iterator[str]: ...

    def end(self, subject: S_contra) -> Iterator[str]: ...


def follow_lines(
    relay: EventRelay,
    key: str,
    after: int,
    fetch: Fetch[S, L],
    finished: Callable[[S], bool],
    renderer: StreamRenderer[S, L],
) -> Iterator[str]:
    """The stream loop: lines after the cursor as they are stored, then the end once ``finished`` says so.
    ``fetch`` reads the subject before its lines, so a final state always comes with every line."""
    yield STREAM_PREAMBLE
    waiter = relay.watch(key)
    cursor = after

    def read(since: int) -> tuple[S | None, list[L]]:
        found = fetch(since)
        db.session.remove()  # hold no database connection while waiting
        return found

    quiet = False
    try:
        while True:
            waiter.clear()  # before reading, so a notice that arrives meanwhile wakes the next wait at once
            subject, lines = relay.read(key, cursor, relay.generation(key), read, fresh=quiet)
            if subject is None:
                return
            done = finished(subject)
            yield from renderer.update(subject, lines)
            if lines:
                cursor = lines[-1].id
            if done:
                yield from renderer.end(subject)
                return
            quiet = not waiter.wait(HEARTBEAT_SECONDS)
            if quiet:
                yield HEARTBEAT
    finally:
        relay.unwatch(key, waiter)
        db.session.remove()


# Lines never change once stored: each is serialised once per process, not once per viewer.
# Keyed by the line's table too: job and agent log ids are counted separately.
_serialised: dict[tuple[str, int], str] = {}
SERIALISED_CACHE_LINES = 20_000


def line_event(line: Line) -> str:
    key = (type(line).__name__, line.id)
    event = _serialised.get(key)
    if event is None:
        if len(_serialised) >= SERIALISED_CACHE_LINES:
            _serialised.clear()
        event = _serialised[key] = sse_event("log", json.dumps(line.to_json()), line.id)
    return event


def follow_statuses(
    relay: EventRelay,
    read_statuses: Callable[[], object],
    *,
    poll_seconds: float | None = None,
    seen: str | None = None,
) -> Iterator[str]:
    """For list and overview pages: a `refresh` event whenever what ``read_statuses`` returns changes.

    Job notices trigger a check; ``poll_seconds`` adds checks for what sends no notice (daemons going silent).
    """
    return follow_changes(relay, {"refresh": read_statuses}, poll_seconds=poll_seconds, seen=seen)


def seen_token(states: Mapping[str, object]) -> str:
    """What a page showed, by reader name (what each of its stream's readers returned while the page rendered),
    for the stream to compare with when it connects: ``?seen=`` in the page's stream URL."""
    return ".".join(f"{name}-{_digest(states[name])}" for name in sorted(states))


def _digest(state: object) -> str:
    # Readers return tuples, lists and dicts of strings and numbers, whose repr is the same in every process.
    return hashlib.blake2b(repr(state).encode(), digest_size=6).hexdigest()


def follow_changes(
    relay: EventRelay,
    readers: dict[str, Callable[[], object]],
    *,
    keys: Callable[[Mapping[str, object]], list[str]] = lambda _shown: [],
    poll_seconds: float | None = None,
    seen: str | None = None,
) -> Iterator[str]:
    """An event named after each reader whenever what it returns changes.

    Job notices and notices for ``keys(shown)`` trigger a check, ``shown`` being what each reader returned last
    (e.g. a workspace's agents, whose keys follow as builds change them: nothing is read twice);
    ``poll_seconds`` adds checks for what sends no notice (an agent timing out, a daemon going silent).
    ``seen`` is the page's :func:`seen_token`: what changed between the page's render and this first read (a job
    queued meanwhile) is sent at once, not left for a next change that may never come.
    """
    yield STREAM_PREAMBLE
    waiter = relay.watch(ANY_JOB)
    watched: set[str] = set()

    def rewatch() -> None:
        current = set(keys(shown))
        for key in watched - current:
            relay.unwatch(key, waiter)
        for key in current - watched:
            relay.watch(key, waiter)
        watched.clear()
        watched.update(current)

    try:
        shown = {name: read() for name, read in readers.items()}
        rewatch()
        db.session.remove()
        if resumed_stream():  # back after the stream's lifetime ended: what changed meanwhile was never sent
            yield "".join(sse_event(name, "changed") for name in readers)
        elif seen is not None and (stale := stale_readers(shown, seen)):
            yield "".join(sse_event(name, "changed") for name in stale)
        quiet_since = time.monotonic()
        while True:
            notified = waiter.wait(poll_seconds or HEARTBEAT_SECONDS)
            if notified:
                time.sleep(STATUS_CHECK_SECONDS)  # let a burst of notices settle into one check
                waiter.clear()
            if notified or poll_seconds:
                changed = [name for name, read in readers.items() if _changed(shown, name, read())]
                rewatch()
                db.session.remove()
                for name in changed:
                    yield sse_event(name, "changed")
                    quiet_since = time.monotonic()
            if time.monotonic() - quiet_since >= HEARTBEAT_SECONDS:
                yield HEARTBEAT
                quiet_since = time.monotonic()
    finally:
        for key in watched:
            relay.unwatch(key, waiter)
        relay.unwatch(ANY_JOB, waiter)
        db.session.remove()


def stale_readers(shown: Mapping[str, object], seen: str) -> list[str]:
    """The readers whose state differs from what the page showed (all of them for a token that is not one)."""
    showed = dict(part.partition("-")[::2] for part in seen.split("."))
    return [name for name in sorted(shown) if showed.get(name) != _digest(shown[name])]


def _changed(shown: dict[str, object], name: str, current: object) -> bool:
    if shown[name] == current:
        return False
    shown[name] = current
    return True
