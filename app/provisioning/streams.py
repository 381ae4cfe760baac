"""Live job logs over Server-Sent Events (DESIGN.md "Logs, live").

Each web process keeps **one** Redis subscription (:class:`LogRelay`) and wakes the streams watching a job when
a notice for it arrives. The database is the source of every line: a woken stream asks for the lines after its
cursor, so a lost or late notice never loses or repeats a line; it only delays one until the next notice or
heartbeat. When Redis is away the relay backs off and, on reconnecting, wakes every stream to fill the gap.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

import redis

from app.extensions import db
from app.limits import resumed_stream
from app.provisioning.jobs import AGENT_CONTROL_PREFIX, AGENT_EVENTS_PREFIX, LOG_CHANNEL_PREFIX, job_logs
from app.provisioning.models import ACTIVE_STATUSES, ProvisionerJob, ProvisionerJobLog

log = logging.getLogger(__name__)

HEARTBEAT_SECONDS = 15.0
ANY_JOB = "*"
# A status page checks for changes at most this often, however many log batches wake it.
STATUS_CHECK_SECONDS = 0.5
RECONNECT_BACKOFF = (0.2, 5.0)
# Sent first: it opens the stream through proxies at once and tells EventSource how soon to come back.
STREAM_PREAMBLE = ": connected\nretry: 1000\n\n"


class Line(Protocol):
    """A stored log line: ids rise within its job or agent."""

    @property
    def id(self) -> int: ...

    def to_json(self) -> dict[str, Any]: ...


S = TypeVar("S")
L = TypeVar("L", bound=Line)
S_contra = TypeVar("S_contra", contravariant=True)
L_contra = TypeVar("L_contra", bound=Line, contravariant=True)


@dataclass
class Snapshot(Generic[S, L]):
    """What one read of the database saw for a job (or agent): its row, and its lines after ``base``."""

    generation: int
    base: int
    subject: S | None
    lines: list[L]


Fetch = Callable[[int], tuple[S | None, list[L]]]


class LogRelay:
    """One pattern subscription for all job log and agent channels, fanned out in memory within this process.

    Job notices wake the streams watching the job (and pages following every job); agent notices wake those
    watching ``agent:<id>``; control messages for an agent go to the control connection this process holds for it.

    It also shares reads: a notice wakes every viewer of the job at once, and nearly all of them want the
    lines after the same cursor, so the first one reads the database and the others reuse what it saw.
    """

    def __init__(self, redis_url: str) -> None:
        self.redis_url = redis_url
        self._waiters: dict[str, set[threading.Event]] = defaultdict(set)
        self._lock = threading.Lock()
        self._started = False
        # Counts the notices for each job; a read taken at generation g contains every line notified up to g.
        self._generations: dict[str, int] = defaultdict(int)
        self._snapshots: dict[str, Snapshot[Any, Any]] = {}
        self._read_locks: dict[str, threading.Lock] = defaultdict(threading.Lock)
        self._control_handlers: dict[str, set[Callable[[bytes], None]]] = defaultdict(set)

    def generation(self, job_id: str) -> int:
        with self._lock:
            return self._generations[job_id]

    def read(
        self, key: str, cursor: int, generation: int, fetch: Fetch[S, L], *, fresh: bool = False
    ) -> tuple[S | None, list[L]]:
        """The subject and its lines after ``cursor`` as of ``generation`` or later; one database read per notice.
        ``fresh`` reads the database whatever is cached (after a quiet heartbeat: a notice may have been lost)."""
        with self._read_locks[key]:
            snapshot: Snapshot[S, L] | None = self._snapshots.get(key)
            if fresh or snapshot is None or snapshot.generation < generation or snapshot.base > cursor:
                subject, lines = fetch(cursor)
                snapshot = Snapshot(generation, cursor, subject, lines)
                self._snapshots[key] = snapshot
        return snapshot.subject, [line for line in snapshot.lines if line.id > cursor]

    def watch(self, job_id: str, waiter: threading.Event | None = None) -> threading.Event:
        """Wake ``waiter`` (a new one unless given: one event may watch several keys) on notices for the key."""
        self._ensure_started()
        waiter = waiter or threading.Event()
        with self._lock:
            self._waiters[job_id].add(waiter)
        return waiter

    def unwatch(self, job_id: str, waiter: threading.Event) -> None:
        with self._lock:
            watchers = self._waiters.get(job_id)
            if watchers is not None:
                watchers.discard(waiter)
                if not watchers:  # the last viewer left: forget the job
                    del self._waiters[job_id]
                    self._generations.pop(job_id, None)
                    self._snapshots.pop(job_id, None)
                    self._read_locks.pop(job_id, None)

    def on_control(self, agent_id: str, handler: Callable[[bytes], None]) -> None:
        """Deliver control messages published for ``agent_id`` to ``handler`` (this process holds its connection)."""
        self._ensure_started()
        with self._lock:
            self._control_handlers[agent_id].add(handler)

    def off_control(self, agent_id: str, handler: Callable[[bytes], None]) -> None:
        with self._lock:
            handlers = self._control_handlers.get(agent_id)
            if handlers is not None:
                handlers.discard(handler)
                if not handlers:
                    del self._control_handlers[agent_id]

    def _wake(self, key: str | None, *, job: bool = True) -> None:
        with self._lock:
            keys = list(self._waiters) if key is None else [key] if key in self._waiters else []
            for watched in keys:  # only watched keys: notices for others must not pile up here
                self._generations[watched] += 1
            targets = [waiter for watched in keys for waiter in self._waiters[watched]]
            if job:
                targets += self._waiters.get(ANY_JOB, ())  # pages that follow every job they can see
        for waiter in targets:
            waiter.set()

    def _deliver(self, channel: str, data: bytes) -> None:
        if channel.startswith(LOG_CHANNEL_PREFIX):
            self._wake(channel[len(LOG_CHANNEL_PREFIX) :])
        elif channel.startswith(AGENT_EVENTS_PREFIX):
            self._wake(agent_key(channel[len(AGENT_EVENTS_PREFIX) :]), job=False)
        elif channel.startswith(AGENT_CONTROL_PREFIX):
            with self._lock:
                handlers = list(self._control_handlers.get(channel[len(AGENT_CONTROL_PREFIX) :], ()))
            for handler in handlers:
                handler(data)

    def _ensure_started(self) -> None:
        with self._lock:
            if self._started:
                return
            self._started = True
        threading.Thread(target=self._run, name="log-relay", daemon=True).start()

    def _run(self) -> None:
        delay, outage_logged = RECONNECT_BACKOFF[0], False
        while True:
            client = redis.Redis.from_url(self.redis_url, socket_connect_timeout=5, health_check_interval=30)
            pubsub = client.pubsub(ignore_subscribe_messages=True)  # type: ignore[no-untyped-call]
            try:
                pubsub.psubscribe(LOG_CHANNEL_PREFIX + "*", AGENT_EVENTS_PREFIX + "*", AGENT_CONTROL_PREFIX + "*")
                if outage_logged:
                    log.warning("log relay: Redis is back; streams catch up from the database")
                delay, outage_logged = RECONNECT_BACKOFF[0], False
                self._wake(None)  # whatever was published while we were away is in the database
                while True:
                    message = pubsub.get_message(timeout=HEARTBEAT_SECONDS)
                    if message is not None and message.get("type") == "pmessage":
                        self._deliver(message["channel"].decode(), message["data"])
            except (redis.RedisError, OSError) as exc:
                if not outage_logged:  # one line per outage, not one per retry
                    log.warning("log relay: lost Redis (%s); retrying with back-off", exc)
                    outage_logged = True
                self._wake(None)
                time.sleep(delay)
                delay = min(delay * 2, RECONNECT_BACKOFF[1])
            finally:
                try:
                    pubsub.close()
                    client.close()
                except (redis.RedisError, OSError):
                    pass


def agent_key(agent_id: str) -> str:
    """The key streams watch for an agent's notices (status, lifecycle, logs, metadata, app health)."""
    return f"agent:{agent_id}"


_relays: dict[str, LogRelay] = {}
_relays_lock = threading.Lock()


def relay_for(redis_url: str) -> LogRelay:
    with _relays_lock:
        if redis_url not in _relays:
            _relays[redis_url] = LogRelay(redis_url)
        return _relays[redis_url]


def sse_event(event: str, data: str, event_id: int | None = None) -> str:
    lines = [f"id: {event_id}"] if event_id is not None else []
    lines.append(f"event: {event}")
    lines += [f"data: {part}" for part in data.split("\n")]
    return "\n".join(lines) + "\n\n"


class StreamRenderer(Protocol[S_contra, L_contra]):
    def update(self, subject: S_contra, lines: Sequence[L_contra]) -> Iterator[str]: ...

    def end(self, subject: S_contra) -> Iterator[str]: ...


def follow_lines(
    relay: LogRelay,
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
                yield ": heartbeat\n\n"
    finally:
        relay.unwatch(key, waiter)
        db.session.remove()


def follow_job(
    relay: LogRelay, job_id: str, after: int, renderer: StreamRenderer[ProvisionerJob, ProvisionerJobLog]
) -> Iterator[str]:
    def fetch(since: int) -> tuple[ProvisionerJob | None, list[ProvisionerJobLog]]:
        job = db.session.get(ProvisionerJob, job_id, populate_existing=True)
        return job, job_logs(job_id, since) if job is not None else []

    return follow_lines(relay, job_id, after, fetch, lambda job: job.status not in ACTIVE_STATUSES, renderer)


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


class JsonRenderer:
    """API.md's stream: one `log` event per line, then `end` with the job's final status."""

    def update(self, job: ProvisionerJob, lines: Sequence[ProvisionerJobLog]) -> Iterator[str]:
        if lines:  # one write for the whole batch, not one per line
            yield "".join(line_event(line) for line in lines)

    def end(self, job: ProvisionerJob) -> Iterator[str]:
        body: dict[str, Any] = {"status": job.status}
        if job.error:
            body["error"] = job.error
        yield sse_event("end", json.dumps(body))


def follow_statuses(
    relay: LogRelay, read_statuses: Callable[[], object], *, poll_seconds: float | None = None
) -> Iterator[str]:
    """For list and overview pages: a `refresh` event whenever what ``read_statuses`` returns changes.

    Job notices trigger a check; ``poll_seconds`` adds checks for what sends no notice (daemons going silent).
    """
    return follow_changes(relay, {"refresh": read_statuses}, poll_seconds=poll_seconds)


def follow_changes(
    relay: LogRelay,
    readers: dict[str, Callable[[], object]],
    *,
    keys: Callable[[Mapping[str, object]], list[str]] = lambda _shown: [],
    poll_seconds: float | None = None,
) -> Iterator[str]:
    """An event named after each reader whenever what it returns changes.

    Job notices and notices for ``keys(shown)`` trigger a check, ``shown`` being what each reader returned last
    (e.g. a workspace's agents, whose keys follow as builds change them: nothing is read twice);
    ``poll_seconds`` adds checks for what sends no notice (an agent timing out, a daemon going silent).
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
                yield ": heartbeat\n\n"
                quiet_since = time.monotonic()
    finally:
        for key in watched:
            relay.unwatch(key, waiter)
        relay.unwatch(ANY_JOB, waiter)
        db.session.remove()


def _changed(shown: dict[str, object], name: str, current: object) -> bool:
    if shown[name] == current:
        return False
    shown[name] = current
    return True


def stream_cursor(after_arg: str | None, last_event_id: str | None) -> int:
    """Resume point: Last-Event-ID (what EventSource sends on reconnect) wins over ``?after=``."""
    for candidate in (last_event_id, after_arg):
        if candidate and candidate.strip().isdigit():
            return int(candidate.strip())
    return 0
