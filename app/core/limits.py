"""Live connections (SSE streams, WebSockets, proxied app requests, long polls): caps per person, per agent and
overall.

A live connection holds one of a web worker's connection slots for as long as it is open, so one member with a
few thousand log streams used to fill every slot, and ``/healthz`` and sign-in stopped answering. Now each live
connection first takes a *slot* in its holder's budgets: a person's (and everyone's together), or an agent's own
(so an agent is never locked out by people's tabs). A full budget answers 429 before the stream or the WebSocket
starts, and the connection is closed (a refused client keeps no slot idling in keep-alive).

Budgets are Redis sorted sets, so every web worker and replica counts the same slots: a member is a slot id and
its score is when the slot expires. Each process renews the slots it holds every ``RENEW_SECONDS``; the slots of
a process that died without releasing them expire within ``SLOT_TTL_SECONDS`` and are swept at the next take.

Streams also end after ``stream_max_lifetime`` (a little less, at random, so streams opened together do not all
come back together) with a ``retry:`` hint: EventSource reconnects with Last-Event-ID and the stream resumes
where it was, and a stream held for days is re-checked (a suspended user's stream does not come back).
"""

from __future__ import annotations

import logging
import random
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import redis
from flask import Flask, Response, current_app, g, make_response, request
from flask_login import current_user

from app.core.config import Settings, draining_marker
from app.core.errors import RateLimited, error_response
from app.core.redis_client import EXTENSION_KEY as REDIS_EXTENSION_KEY

log = logging.getLogger(__name__)

EXTENSION_KEY = "slipway_live_slots"
KEY_PREFIX = "slipway:live:"
SLOT_TTL_SECONDS = 60.0
RENEW_SECONDS = 20.0
# An agent's control connection may use a few slots that its tunnels never may: however many tunnels people
# open into a workspace, its agent can always reconnect (and a reconnect briefly overlaps the old connection).
AGENT_LIFELINE_RESERVE = 4
# Set in the WSGI environ by a refusal; the web worker (app/server/worker.py) then closes the connection.
CLOSE_CONNECTION_ENVIRON = "slipway.close_connection"
# What a stream that ran out of time sends last: EventSource comes back after this many milliseconds.
RECONNECT_MILLISECONDS = 1000
# The event id a stream without ids of its own sends before it ends, so its reconnect can be told apart from a
# first visit: status pages then re-check at once what may have changed while they were away.
RESUME_MARKER = "resume"
REFUSED_RETRY_AFTER_SECONDS = 10

# KEYS: the budgets; ARGV: slot ttl, slot id, then each budget's cap. Returns {0} when the slot was taken in
# every budget, else {index of the first full budget, its count}. Time is Redis's, the same for every replica.
TAKE_SLOT = """
local now = redis.call('TIME')
local now_seconds = tonumber(now[1]) + tonumber(now[2]) / 1000000
local ttl = tonumber(ARGV[1])
for index, key in ipairs(KEYS) do
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now_seconds)
  local count = redis.call('ZCARD', key)
  if count >= tonumber(ARGV[2 + index]) then
    return {index, count}
  end
end
for _, key in ipairs(KEYS) do
  redis.call('ZADD', key, now_seconds + ttl, ARGV[2])
  redis.call('EXPIRE', key, math.ceil(ttl) + 1)
end
return {0}
"""


@dataclass(frozen=True)
class Budget:
    """One Redis sorted set of slots and how many it may hold; ``refusal`` names who is full ({count}, {cap})."""

    key: str
    cap: int
    refusal: str


class LiveConnectionsFull(RateLimited):
    """A budget is full: 429, and the connection is closed."""


@dataclass(eq=False)
class Slot:
    """A taken slot. ``release`` is idempotent; a slot taken while Redis was away has no budgets."""

    id: str
    keys: tuple[str, ...]
    pool: LiveSlots | None = None
    handed_over: bool = False
    released: bool = field(default=False, repr=False)

    def release(self) -> None:
        if self.released:
            return
        self.released = True
        if self.pool is not None:
            self.pool.release(self)


class LiveSlots:
    """The slots this process holds, renewed in the background while held."""

    def __init__(
        self, client: redis.Redis, *, ttl: float = SLOT_TTL_SECONDS, renew_every: float = RENEW_SECONDS
    ) -> None:
        self.client = client
        self.ttl = ttl
        self.renew_every = renew_every
        self._take = client.register_script(TAKE_SLOT)
        self._held: dict[str, Slot] = {}
        self._lock = threading.Lock()
        self._keeper: threading.Thread | None = None
        self._redis_failing = False

    def take(self, budgets: Sequence[Budget]) -> Slot:
        """A slot in every budget, or :class:`LiveConnectionsFull` naming the first full one.

        When Redis does not answer, the connection is let through uncounted: live logs must not stop because
        the limiter cannot count (and a stream cannot follow anything without Redis for long anyway)."""
        slot = Slot(uuid.uuid4().hex, tuple(KEY_PREFIX + budget.key for budget in budgets), self)
        try:
            outcome = self._take(keys=list(slot.keys), args=[self.ttl, slot.id, *(budget.cap for budget in budgets)])
        except redis.RedisError as exc:
            self._note_redis_failure(exc)
            return Slot(slot.id, ())
        self._redis_failing = False
        full, count = (int(outcome[0]), int(outcome[1])) if outcome[0] else (0, 0)
        if full:
            budget = budgets[full - 1]
            raise LiveConnectionsFull(budget.refusal.format(count=count, cap=budget.cap))
        with self._lock:
            self._held[slot.id] = slot
            if self._keeper is None:
                self._keeper = threading.Thread(target=self._keep, name="live-slots", daemon=True)
                self._keeper.start()
        return slot

    def release(self, slot: Slot) -> None:
        with self._lock:
            self._held.pop(slot.id, None)
        try:
            with self.client.pipeline(transaction=False) as pipe:
                for key in slot.keys:
                    pipe.zrem(key, slot.id)
                pipe.execute()
        except redis.RedisError as exc:  # the slot expires on its own: it is no longer renewed
            self._note_redis_failure(exc)

    def renew(self) -> None:
        """Push back the expiry of every slot this process holds (XX: a slot released meanwhile stays gone)."""
        with self._lock:
            slots = list(self._held.values())
        if not slots:
            return
        seconds, microseconds = self.client.time()
        expires = seconds + microseconds / 1_000_000 + self.ttl
        with self.client.pipeline(transaction=False) as pipe:
            for slot in slots:
                for key in slot.keys:
                    pipe.zadd(key, {slot.id: expires}, xx=True)
            for key in {key for slot in slots for key in slot.keys}:
                pipe.expire(key, int(self.ttl) + 1)
            pipe.execute()

    def _keep(self) -> None:
        """Renew while this process holds slots; a process that holds none has no keeper (and no Redis traffic)."""
        while True:
            time.sleep(self.renew_every)
            with self._lock:
                if not self._held:
                    self._keeper = None
                    return
            try:
                self.renew()
            except redis.RedisError as exc:
                self._note_redis_failure(exc)
            except Exception:  # the keeper must outlive any one bad pass, or every slot would expire
                log.exception("renewing live connection slots failed; retrying")

    def _note_redis_failure(self, exc: Exception) -> None:
        if not self._redis_failing:  # one line per outage, not one per connection
            log.warning("live connection limits: Redis did not answer (%s); not counting until it does", exc)
        self._redis_failing = True


def init_app(app: Flask) -> None:
    app.extensions[EXTENSION_KEY] = LiveSlots(app.extensions[REDIS_EXTENSION_KEY])

    @app.errorhandler(LiveConnectionsFull)
    def refuse(error: LiveConnectionsFull) -> Response:
        # Close the connection too: a refused client that kept it alive would still hold a worker's slot.
        request.environ[CLOSE_CONNECTION_ENVIRON] = True
        response = make_response(error_response(error))
        response.headers["Retry-After"] = str(REFUSED_RETRY_AFTER_SECONDS)
        return response


def _settings() -> Settings:
    settings: Settings = current_app.config["SLIPWAY_SETTINGS"]
    return settings


def person_budgets(settings: Settings, user_id: str) -> list[Budget]:
    """A person's budget and everyone's: what their streams, terminals, tunnels and long polls count against."""
    return [
        Budget(
            f"user:{user_id}",
            settings.max_live_connections_per_user,
            "You have {count} live streams open (log streams, terminals, tunnels); close some tabs and try again.",
        ),
        _everyone(settings),
    ]


def agent_budget(settings: Settings, agent_id: str, *, lifeline: bool = False) -> Budget:
    cap = settings.max_live_connections_per_agent + (AGENT_LIFELINE_RESERVE if lifeline else 0)
    return Budget(f"agent:{agent_id}", cap, "This workspace agent has {count} connections open; it may open no more.")


def _everyone(settings: Settings) -> Budget:
    return Budget(
        "all",
        settings.max_live_connections,
        "The server has {count} live streams and connections open, its limit; try again in a minute.",
    )


def request_budgets(settings: Settings, *, lifeline: bool = False) -> list[Budget]:
    """The budgets the request's live connection counts against: its agent's, or its person's and everyone's.

    ``lifeline`` marks an agent's control connection, which may use the slots kept back from its tunnels."""
    agent = g.get("agent")
    if agent is not None:
        return [agent_budget(settings, agent.id, lifeline=lifeline)]
    user = g.get("api_user") or (current_user if current_user.is_authenticated else None)
    if user is not None:
        return person_budgets(settings, user.id)
    # A visitor of a public app: counted by address, with a person's allowance.
    mine = Budget(
        f"address:{request.remote_addr or 'unknown'}",
        settings.max_live_connections_per_user,
        "Your address has {count} live connections open; close some and try again.",
    )
    return [mine, _everyone(settings)]


@contextmanager
def live_connection(*, lifeline: bool = False, budgets: Sequence[Budget] | None = None) -> Iterator[Slot]:
    """Hold a slot for the request's live connection, released on leaving unless handed to a stream or response.

    Take it before anything costly (dialing an agent): a refusal must leave nothing behind. Nested uses within
    one request share the outer slot. ``budgets`` replaces the request's own (:func:`request_budgets`) when the
    connection is held for someone the request does not name, such as a daemon's owner."""
    held: Slot | None = g.get("live_slot")
    if held is not None:
        yield held
        return
    pool: LiveSlots = current_app.extensions[EXTENSION_KEY]
    slot = pool.take(budgets if budgets is not None else request_budgets(_settings(), lifeline=lifeline))
    g.live_slot = slot
    try:
        yield slot
    finally:
        g.pop("live_slot", None)
        if not slot.handed_over:
            slot.release()


def until_closed(response: Response) -> Response:
    """Keep the request's slot until ``response`` has been sent (a streamed, proxied body)."""
    slot: Slot | None = g.get("live_slot")
    if slot is not None:
        slot.handed_over = True
        response.call_on_close(slot.release)
    return response


class BoundedStream:
    """An SSE stream that holds a slot while open and ends once its lifetime is over, between two events."""

    def __init__(
        self, events: Iterator[str], slot: Slot, lifetime: float, *, has_ids: bool, draining: Path | None = None
    ) -> None:
        self.events = events
        # While this file exists the replica is draining: the stream ends at its next event or heartbeat, cleanly,
        # and the client resumes on another replica rather than being cut off when this one stops.
        self.draining = draining
        self.slot = slot
        self.deadline = time.monotonic() + lifetime
        self.has_ids = has_ids
        self.finished = False
        # Released however the stream goes: a response closed before its first event never reaches close().
        self._finalizer = weakref.finalize(self, slot.release)
        self._finalizer.atexit = False  # a process that exits holds nothing: its slots expire

    def __iter__(self) -> BoundedStream:
        return self

    def __next__(self) -> str:
        if self.finished:
            raise StopIteration
        if time.monotonic() >= self.deadline or (self.draining is not None and self.draining.exists()):
            self.close()
            # No id of its own: mark the reconnect. With ids, EventSource resends the last one it saw.
            marker = "" if self.has_ids else f"id: {RESUME_MARKER}\n"
            return f": this stream has been open long enough; reconnect\n{marker}retry: {RECONNECT_MILLISECONDS}\n\n"
        try:
            chunk = next(self.events)
        except BaseException:
            self.close()
            raise
        if not self.has_ids and (chunk.startswith("id: ") or "\nid: " in chunk):
            self.has_ids = True
        return chunk

    def close(self) -> None:
        if self.finished:
            return
        self.finished = True
        try:
            close = getattr(self.events, "close", None)
            if close is not None:
                close()
        finally:
            self._finalizer()


def live_stream(events: Iterator[str]) -> Iterator[str]:
    """``events`` as a live stream: a slot taken now (429 here, before the response starts), and a lifetime."""
    with live_connection() as slot:
        slot.handed_over = True
    lifetime = _settings().stream_max_lifetime * random.uniform(0.9, 1.0)  # noqa: S311 - spreading, not secrecy
    # A client that resumes with a real event id has seen ids on this stream before.
    last_id = request.headers.get("Last-Event-ID", "")
    return BoundedStream(
        events,
        slot,
        lifetime,
        has_ids=bool(last_id) and last_id != RESUME_MARKER,
        draining=draining_marker(_settings().data_dir),
    )


def replica_draining() -> Callable[[], bool]:
    """Whether this replica has begun draining (SIGTERM): long-lived connections look at it to end themselves with
    a "reconnect elsewhere" close rather than be cut when the replica stops."""
    return draining_marker(_settings().data_dir).exists


def resumed_stream() -> bool:
    """Whether this request reconnects a stream without ids of its own that ended for its lifetime."""
    return request.headers.get("Last-Event-ID") == RESUME_MARKER


def holders(client: redis.Redis, budget_key: str) -> int:
    """How many live slots a budget holds now (expired ones excluded), e.g. ``user:<id>``; for operators and tests."""
    seconds, microseconds = client.time()
    return int(client.zcount(KEY_PREFIX + budget_key, seconds + microseconds / 1_000_000, "+inf"))
