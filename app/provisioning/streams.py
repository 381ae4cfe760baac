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
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import redis

from app.extensions import db
from app.provisioning.jobs import LOG_CHANNEL_PREFIX, job_logs
from app.provisioning.models import ACTIVE_STATUSES, ProvisionerJob, ProvisionerJobLog

log = logging.getLogger(__name__)

HEARTBEAT_SECONDS = 15.0
ANY_JOB = "*"
# A status page checks for changes at most this often, however many log batches wake it.
STATUS_CHECK_SECONDS = 0.5
RECONNECT_BACKOFF = (0.2, 5.0)
# Sent first: it opens the stream through proxies at once and tells EventSource how soon to come back.
STREAM_PREAMBLE = ": connected\nretry: 1000\n\n"


@dataclass
class Snapshot:
    """What one read of the database saw for a job: its row, and its lines after ``base``."""

    generation: int
    base: int
    job: ProvisionerJob | None
    lines: list[ProvisionerJobLog]


Fetch = Callable[[int], tuple[ProvisionerJob | None, list[ProvisionerJobLog]]]


class LogRelay:
    """One pattern subscription for all job log channels, fanned out in memory to the streams of this process.

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
        self._snapshots: dict[str, Snapshot] = {}
        self._read_locks: dict[str, threading.Lock] = defaultdict(threading.Lock)

    def generation(self, job_id: str) -> int:
        with self._lock:
            return self._generations[job_id]

    def read(
        self, job_id: str, cursor: int, generation: int, fetch: Fetch, *, fresh: bool = False
    ) -> tuple[ProvisionerJob | None, list[ProvisionerJobLog]]:
        """The job and its lines after ``cursor`` as of ``generation`` or later; one database read per notice.
        ``fresh`` reads the database whatever is cached (after a quiet heartbeat: a notice may have been lost)."""
        with self._read_locks[job_id]:
            snapshot = self._snapshots.get(job_id)
            if fresh or snapshot is None or snapshot.generation < generation or snapshot.base > cursor:
                job, lines = fetch(cursor)
                snapshot = Snapshot(generation, cursor, job, lines)
                self._snapshots[job_id] = snapshot
        return snapshot.job, [line for line in snapshot.lines if line.id > cursor]

    def watch(self, job_id: str) -> threading.Event:
        self._ensure_started()
        waiter = threading.Event()
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

    def _wake(self, job_id: str | None) -> None:
        with self._lock:
            jobs = list(self._waiters) if job_id is None else [job_id] if job_id in self._waiters else []
            for watched in jobs:  # only watched jobs: notices for others must not pile up here
                self._generations[watched] += 1
            targets = [waiter for watched in jobs for waiter in self._waiters[watched]]
            targets += self._waiters.get(ANY_JOB, ())  # pages that follow every job they can see
        for waiter in targets:
            waiter.set()

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
                pubsub.psubscribe(LOG_CHANNEL_PREFIX + "*")
                if outage_logged:
                    log.warning("log relay: Redis is back; streams catch up from the database")
                delay, outage_logged = RECONNECT_BACKOFF[0], False
                self._wake(None)  # whatever was published while we were away is in the database
                while True:
                    message = pubsub.get_message(timeout=HEARTBEAT_SECONDS)
                    if message is not None and message.get("type") == "pmessage":
                        self._wake(message["channel"].decode()[len(LOG_CHANNEL_PREFIX) :])
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


class StreamRenderer(Protocol):
    def update(self, job: ProvisionerJob, lines: list[ProvisionerJobLog]) -> Iterator[str]: ...

    def end(self, job: ProvisionerJob) -> Iterator[str]: ...


def follow_job(relay: LogRelay, job_id: str, after: int, renderer: StreamRenderer) -> Iterator[str]:
    """The stream loop: lines after the cursor as they are stored, then the end once the job has finished."""
    yield STREAM_PREAMBLE
    waiter = relay.watch(job_id)
    cursor = after

    def fetch(since: int) -> tuple[ProvisionerJob | None, list[ProvisionerJobLog]]:
        # The job before its lines: lines are stored before a job ends, so a final status brings every line.
        job = db.session.get(ProvisionerJob, job_id, populate_existing=True)
        lines = job_logs(job_id, since) if job is not None else []
        db.session.remove()  # hold no database connection while waiting
        return job, lines

    quiet = False
    try:
        while True:
            waiter.clear()  # before reading, so a notice that arrives meanwhile wakes the next wait at once
            job, lines = relay.read(job_id, cursor, relay.generation(job_id), fetch, fresh=quiet)
            if job is None:
                return
            finished = job.status not in ACTIVE_STATUSES
            yield from renderer.update(job, lines)
            if lines:
                cursor = lines[-1].id
            if finished:
                yield from renderer.end(job)
                return
            quiet = not waiter.wait(HEARTBEAT_SECONDS)
            if quiet:
                yield ": heartbeat\n\n"
    finally:
        relay.unwatch(job_id, waiter)
        db.session.remove()


# Lines never change once stored: each is serialised once per process, not once per viewer.
_serialised: dict[int, str] = {}
SERIALISED_CACHE_LINES = 20_000


def _line_event(line: ProvisionerJobLog) -> str:
    event = _serialised.get(line.id)
    if event is None:
        if len(_serialised) >= SERIALISED_CACHE_LINES:
            _serialised.clear()
        event = _serialised[line.id] = sse_event("log", json.dumps(line.to_json()), line.id)
    return event


class JsonRenderer:
    """API.md's stream: one `log` event per line, then `end` with the job's final status."""

    def update(self, job: ProvisionerJob, lines: list[ProvisionerJobLog]) -> Iterator[str]:
        if lines:  # one write for the whole batch, not one per line
            yield "".join(_line_event(line) for line in lines)

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
    yield STREAM_PREAMBLE
    waiter = relay.watch(ANY_JOB)
    try:
        shown = read_statuses()
        db.session.remove()
        while True:
            notified = waiter.wait(poll_seconds or HEARTBEAT_SECONDS)
            if notified:
                time.sleep(STATUS_CHECK_SECONDS)  # let a burst of notices settle into one check
                waiter.clear()
            if notified or poll_seconds:
                current = read_statuses()
                db.session.remove()
                if current != shown:
                    shown = current
                    yield sse_event("refresh", "changed")
                    continue
            if not notified:
                yield ": heartbeat\n\n"
    finally:
        relay.unwatch(ANY_JOB, waiter)
        db.session.remove()


def stream_cursor(after_arg: str | None, last_event_id: str | None) -> int:
    """Resume point: Last-Event-ID (what EventSource sends on reconnect) wins over ``?after=``."""
    for candidate in (last_event_id, after_arg):
        if candidate and candidate.strip().isdigit():
            return int(candidate.strip())
    return 0
