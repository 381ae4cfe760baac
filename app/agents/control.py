"""An agent's control connection: liveness by heartbeat, and the dials users' tunnels need (agent/README.md).

While the connection is open the server pings the agent every heartbeat interval and stamps
``last_connected_at``; an agent that stops answering for two intervals is closed and marked disconnected.
Dials are published on Redis by whichever process a user reached, signed; the process holding this connection
receives them through its one subscription, checks the signature, and writes the dial here, once: whoever can
read the channel could otherwise replay a fresh signed dial and be handed a second tunnel (an SSH connection
needs no password once the server has dialed it).
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable

from app.agents import services
from app.agents.handover import HANDOVER_POLL, token_handover
from app.agents.tunnels import DIAL_FRESH_SECONDS, verified_dial
from app.core.columns import new_id
from app.core.extensions import db
from app.core.signing import Signer
from app.core.websocket import WebSocket, WebSocketClosed
from app.events.relay import EventRelay
from protocol.agentapi import (
    CLOSE_NEW_TOKEN,
    CLOSE_OUTDATED,
    CLOSE_SERVER_RESTARTING,
    CLOSE_SUPERSEDED,
    CONTROL_RECHECK,
    SERVER_RESTARTING_REASON,
    NewToken,
)

log = logging.getLogger(__name__)

OUTDATED_REASON = "This agent no longer belongs to the workspace's current build."
# Dials waiting to be written; beyond this the agent is not keeping up and further dials fail (they time out).
MAX_PENDING_DIALS = 256
# Queued instead of a dial: look at the database now (never a dial's text, which is JSON).
LOOK_NOW = ""


class ControlConnection:
    def __init__(
        self,
        websocket: WebSocket,
        agent_id: str,
        relay: EventRelay,
        heartbeat_seconds: int,
        secret_key: str,
        draining: Callable[[], bool] = lambda: False,
        pending_dials: Callable[[], list[bytes]] = list,
    ) -> None:
        self.websocket = websocket
        # The agent's dials nobody has answered yet: published while it was between connections, they reached no
        # connection, and this one passes them on.
        self.pending_dials = pending_dials
        # True once this replica drains: the agent is told to reconnect (to another replica) at once, rather than
        # finding its connection cut when the replica stops and waiting out its back-off.
        self.draining = draining
        self.agent_id = agent_id
        self.relay = relay
        self.signer = Signer(secret_key)
        self.heartbeat_seconds = heartbeat_seconds
        self.connection_id = new_id()
        self.dials: queue.Queue[str] = queue.Queue(maxsize=MAX_PENDING_DIALS)
        # Tunnels whose dial this connection passed on, until their dials are too old to pass anyway.
        self.passed_on: dict[str, float] = {}
        self.closed = threading.Event()
        # A claim's build runs that will give this agent a new token: look again soon, not at the next heartbeat.
        self.awaiting_token = False

    def serve(self) -> None:
        # Listen for dials before the agent shows as connected: users dial as soon as it does.
        self.relay.on_control(self.agent_id, self._queue_dial)
        services.mark_connected(self.agent_id, self.connection_id)
        db.session.remove()  # hold no database connection while the agent is connected
        self._pass_on_pending_dials()
        reader = threading.Thread(target=self._read, name=f"agent-{self.agent_id[:8]}", daemon=True)
        reader.start()
        self.dials.put_nowait(LOOK_NOW)  # an agent let in only to be handed its new token waits for no heartbeat
        try:
            self._loop()
        finally:
            self.relay.off_control(self.agent_id, self._queue_dial)
            self.closed.set()
            services.mark_disconnected(self.agent_id, self.connection_id)
            db.session.remove()

    def _pass_on_pending_dials(self) -> None:
        """Once listening: a dial published since is in the pending ones too, and passed on once."""
        for message in self.pending_dials():
            self._queue_dial(message)

    def _queue_dial(self, message: bytes) -> None:
        """Called by the relay's one thread, for each message published for this agent."""
        if message == CONTROL_RECHECK:
            with contextlib.suppress(queue.Full):  # a full queue wakes the loop anyway
                self.dials.put_nowait(LOOK_NOW)
            return
        dial = verified_dial(self.signer, self.agent_id, message)
        if dial is None:
            log.warning("agent %s: dropped a control message that the server did not sign", self.agent_id)
            return
        if not self._first_dial_of(dial.tunnel_id):
            log.warning("agent %s: dropped a dial it had already passed on (tunnel %s)", self.agent_id, dial.tunnel_id)
            return
        try:
            self.dials.put_nowait(dial.dumps())
        except queue.Full:
            log.warning("agent %s is not taking dials; dropping one", self.agent_id)

    def _first_dial_of(self, tunnel_id: str) -> bool:
        now = time.monotonic()
        # A dial verifies from up to the freshness window before its issued_at (another replica's clock may be
        # ahead) until the window after it: remember it for both.
        self.passed_on = {tunnel: until for tunnel, until in self.passed_on.items() if until > now}
        if tunnel_id in self.passed_on:
            return False
        self.passed_on[tunnel_id] = now + 2 * DIAL_FRESH_SECONDS
        return True

    def _read(self) -> None:
        """Drain what the agent sends (pongs, close); the control protocol has no other agent messages."""
        try:
            while not self.closed.is_set():
                self.websocket.receive(timeout=1.0)
        except WebSocketClosed:
            pass
        finally:
            self.closed.set()

    def _loop(self) -> None:
        interval = float(self.heartbeat_seconds)
        next_beat = time.monotonic() + interval
        ping_sent = time.monotonic()
        self.websocket.last_pong = ping_sent
        self.websocket.ping()
        while not self.closed.is_set():
            if self.draining():
                self.websocket.close(CLOSE_SERVER_RESTARTING, SERVER_RESTARTING_REASON)
                return
            try:
                message = self.dials.get(timeout=max(min(next_beat - time.monotonic(), 1.0), 0.0))
                if message == LOOK_NOW:
                    next_beat = time.monotonic()
                else:
                    self.websocket.send(message)
            except queue.Empty:
                pass
            except WebSocketClosed:
                return
            if time.monotonic() < next_beat:
                continue
            next_beat = time.monotonic() + interval
            if not self._still_wanted():
                return
            if self.awaiting_token:
                next_beat = time.monotonic() + HANDOVER_POLL
                continue
            if self.websocket.last_pong < ping_sent:  # the last ping is unanswered: no new one until it is
                if time.monotonic() - ping_sent > 2 * interval:
                    self.websocket.close(1011, "ping timeout")
                    return
                continue
            ping_sent = time.monotonic()
            try:
                self.websocket.ping()
            except WebSocketClosed:
                return

    def _still_wanted(self) -> bool:
        """Stamp the heartbeat; close when the agent is outdated (handing it its new token first when a claim gave it
        one, and waiting for the claim's build before that) or another connection of it took over."""
        try:
            current = services.agent_is_current(self.agent_id)
            alive = current and services.record_heartbeat(self.agent_id, self.connection_id)
            handover = token_handover(self.agent_id) if not current else None
        finally:
            db.session.remove()
        self.awaiting_token = handover is not None and handover.waiting
        if self.awaiting_token:
            return True
        if handover is not None and handover.token:
            self._hand_over(handover.token)
        elif not current:
            self.websocket.close(CLOSE_OUTDATED, OUTDATED_REASON)
        elif not alive:
            self.websocket.close(CLOSE_SUPERSEDED, "A newer connection of this agent took over.")
        return alive

    def _hand_over(self, token: str) -> None:
        try:
            self.websocket.send(NewToken(token=token).dumps())
            self.websocket.close(CLOSE_NEW_TOKEN, "This agent has a new token: reconnect with it.")
        except WebSocketClosed:
            log.warning("agent %s left before its new token could be handed over", self.agent_id)
