"""The process's one Redis subscription, and the in-memory fan-out of what arrives on it (see ``app/events``).

Streams, waiting daemons and agent connections register a :class:`threading.Event` under a key; a notice for the
key sets it. A woken stream reads the database itself. Reads are shared: a notice wakes every viewer of a job at
once, and nearly all of them want the lines after the same cursor, so the first one reads and the rest reuse it.
When Redis is away the relay backs off and, on reconnecting, wakes every stream to fill the gap.
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

import redis

from protocol.channels import (
    AGENT_CONTROL_CHANNEL_PREFIX,
    AGENT_EVENTS_CHANNEL_PREFIX,
    JOB_LOG_CHANNEL_PREFIX,
    JOB_QUEUED_CHANNEL_PREFIX,
)
from protocol.codec import JsonObject

log = logging.getLogger(__name__)

CHANNEL_PREFIXES = (
    JOB_LOG_CHANNEL_PREFIX,
    AGENT_EVENTS_CHANNEL_PREFIX,
    JOB_QUEUED_CHANNEL_PREFIX,
    AGENT_CONTROL_CHANNEL_PREFIX,
)
HEARTBEAT_SECONDS = 15.0
# The key of pages that follow every job they can see (any job notice wakes them).
ANY_JOB = "*"
RECONNECT_BACKOFF = (0.2, 5.0)


class Line(Protocol):
    """A stored line as streams send it: ids rise within its job or agent."""

    @property
    def id(self) -> int: ...

    def to_json(self) -> JsonObject: ...


S = TypeVar("S")
L = TypeVar("L", bound=Line)


def agent_key(agent_id: str) -> str:
    """The key streams watch for an agent's notices (status, lifecycle, logs, metadata, app health)."""
    return f"agent:{agent_id}"


def queue_key(queue: str) -> str:
    """The key daemons waiting over HTTP watch for jobs queued on one of their queues."""
    return f"queue:{queue}"


@dataclass
class Snapshot(Generic[S, L]):
    """What one read of the database saw for a job (or agent): its row, and its lines after ``base``."""

    generation: int
    base: int
    subject: S | None
    lines: list[L]


Fetch = Callable[[int], tuple[S | None, list[L]]]


class EventRelay:
    """One pattern subscription for every notice channel, fanned out in memory within this process.

    Job notices wake the streams watching the job (and pages following every job); agent notices wake those
    watching ``agent:<id>``; queue notices wake daemons waiting on ``queue:<name>``; control messages for an agent
    go to the control connection this process holds for it (which checks their signature before passing them on).

    It also shares reads: a notice wakes every viewer of the job at once, and nearly all of them want the
    lines after the same cursor, so the first one reads the database and the others reuse what it saw.
    """

    def __init__(self, redis_url: str) -> None:
        self.redis_url = redis_url
        self._waiters: dict[str, set[threading.Event]] = defaultdict(set)
        self._lock = threading.Lock()
        self._started = False
        self._closed = threading.Event()
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

    def watching(self, key: str) -> bool:
        """Whether anything in this process waits for notices on ``key``."""
        with self._lock:
            return bool(self._waiters.get(key))

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
        if channel.startswith(JOB_LOG_CHANNEL_PREFIX):
            self._wake(channel[len(JOB_LOG_CHANNEL_PREFIX) :])
        elif channel.startswith(AGENT_EVENTS_CHANNEL_PREFIX):
            self._wake(agent_key(channel[len(AGENT_EVENTS_CHANNEL_PREFIX) :]), job=False)
        elif channel.startswith(JOB_QUEUED_CHANNEL_PREFIX):
            self._wake(queue_key(channel[len(JOB_QUEUED_CHANNEL_PREFIX) :]), job=False)
        elif channel.startswith(AGENT_CONTROL_CHANNEL_PREFIX):
            with self._lock:
                handlers = list(self._control_handlers.get(channel[len(AGENT_CONTROL_CHANNEL_PREFIX) :], ()))
            for handler in handlers:
                handler(data)

    def close(self) -> None:
        """Stop following Redis (its app is closed): the thread ends at its next wake-up, without a word about a
        Redis that went away with the app."""
        self._closed.set()

    def _ensure_started(self) -> None:
        with self._lock:
            if self._started:
                return
            self._started = True
        threading.Thread(target=self._run, name="event-relay", daemon=True).start()

    def _run(self) -> None:
        delay, outage_logged = RECONNECT_BACKOFF[0], False
        while not self._closed.is_set():
            client = redis.Redis.from_url(self.redis_url, socket_connect_timeout=5, health_check_interval=30)
            pubsub = client.pubsub(ignore_subscribe_messages=True)  # type: ignore[no-untyped-call]
            try:
                pubsub.psubscribe(*(prefix + "*" for prefix in CHANNEL_PREFIXES))
                if outage_logged:
                    log.warning("event relay: Redis is back; streams catch up from the database")
                delay, outage_logged = RECONNECT_BACKOFF[0], False
                self._wake(None)  # whatever was published while we were away is in the database
                while not self._closed.is_set():
                    message = pubsub.get_message(timeout=HEARTBEAT_SECONDS)
                    if message is not None and message.get("type") == "pmessage":
                        self._deliver(message["channel"].decode(), message["data"])
            except (redis.RedisError, OSError) as exc:
                if self._closed.is_set():
                    return
                if not outage_logged:  # one line per outage, not one per retry
                    log.warning("event relay: lost Redis (%s); retrying with back-off", exc)
                    outage_logged = True
                self._wake(None)
                self._closed.wait(delay)
                delay = min(delay * 2, RECONNECT_BACKOFF[1])
            finally:
                try:
                    pubsub.close()
                    client.close()
                except (redis.RedisError, OSError):
                    pass
