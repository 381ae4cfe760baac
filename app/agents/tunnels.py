"""Tunnels between a user and an agent, relayed through Redis so the two may be on different web replicas.

A user's WebSocket arrives at one web process. The server asks the agent, over its control connection (held by
whichever process the agent reached), to dial back; the agent's tunnel WebSocket then arrives at any process.
Each half pushes what its own end sends onto a Redis list that the other half pops. Lists, unlike pub/sub, keep
what is sent before the other half arrives and never drop a slow reader; a sender waits while the list is long,
so a fast sender and a slow receiver cost a bounded amount of memory (see ``HIGH_WATER_ITEMS``).
"""

from __future__ import annotations

import contextlib
import json
import select
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import redis

from app.core.columns import new_id
from app.core.signing import Signer
from app.core.websocket import WebSocketClosed
from protocol.agentapi import (
    CLOSE_DIAL_FAILED,
    CLOSE_NO_ANSWER,
    CLOSE_SERVER_RESTARTING,
    SERVER_RESTARTING_REASON,
    Dial,
    DialService,
)
from protocol.channels import AGENT_CONTROL_CHANNEL_PREFIX, TUNNEL_KEY_PREFIX
from protocol.codec import ProtocolError

PREFIX = TUNNEL_KEY_PREFIX
DATA, TEXT, CLOSE, OPEN = b"d", b"t", b"c", b"o"
# A sender waits once this many frames are queued for its peer, until fewer than LOW_WATER_ITEMS remain.
HIGH_WATER_ITEMS = 64
LOW_WATER_ITEMS = 16
# Frames moved per round trip while a stream is busy.
POP_BATCH = 32
PUSH_BATCH = 16
POP_TIMEOUT_SECONDS = 1.0
KEY_TTL_SECONDS = 120
ALIVE_TTL_SECONDS = 30
ALIVE_EVERY_SECONDS = 10.0
STALL_SECONDS = 60.0
DIAL_TIMEOUT_SECONDS = 15.0
# How long a signed dial is good for (clocks of replicas may differ a little); older ones are dropped as replays.
DIAL_FRESH_SECONDS = DIAL_TIMEOUT_SECONDS + 5
CLOSE_NORMAL = 1000


class TunnelBroken(Exception):
    """The other half is gone or stopped reading."""


@dataclass(frozen=True)
class Item:
    kind: bytes
    payload: bytes


def close_item(code: int, reason: str) -> bytes:
    return struct.pack("!H", code) + reason.encode()[:123]


def parse_close(payload: bytes) -> tuple[int, str]:
    if len(payload) < 2:
        return CLOSE_NORMAL, ""
    return struct.unpack("!H", payload[:2])[0], payload[2:].decode(errors="replace")


@dataclass(frozen=True)
class Holder:
    """Who opened a tunnel into which workspace: what decides, when access changes, whether it may stay open
    (app/agents/connections.py)."""

    user_id: str
    workspace_id: str


def holders_key(workspace_id: str) -> str:
    """A hash of the workspace's open tunnels: tunnel id → the person who opened it."""
    return f"{PREFIX}holders:{workspace_id}"


def held_key(user_id: str) -> str:
    """A set of the workspaces the person has tunnels open into."""
    return f"{PREFIX}held-by:{user_id}"


def hold(client: redis.Redis, tunnel_id: str, holder: Holder) -> None:
    """List (again: each beat renews it) the tunnel under its workspace and its workspace under its holder; both
    expire unless renewed, so a process that died leaves nothing for long."""
    with client.pipeline(transaction=False) as pipe:
        pipe.hset(holders_key(holder.workspace_id), tunnel_id, holder.user_id)
        pipe.expire(holders_key(holder.workspace_id), KEY_TTL_SECONDS)
        pipe.sadd(held_key(holder.user_id), holder.workspace_id)
        pipe.expire(held_key(holder.user_id), KEY_TTL_SECONDS)
        pipe.execute()


def release(client: redis.Redis, tunnel_id: str, holder: Holder) -> None:
    client.hdel(holders_key(holder.workspace_id), tunnel_id)


def open_tunnels(client: redis.Redis, workspace_id: str) -> dict[str, str]:
    """The workspace's open tunnels: tunnel id → holder's user id."""
    raw = client.hgetall(holders_key(workspace_id))
    return {_text(key): _text(value) for key, value in raw.items()}


def held_workspaces(client: redis.Redis, user_id: str) -> list[str]:
    return sorted(_text(member) for member in client.smembers(held_key(user_id)))


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def close_tunnel(client: redis.Redis, tunnel_id: str, workspace_id: str, code: int, reason: str) -> None:
    """End a tunnel from outside it: both halves read a close from their lists, as if the other side had closed
    it (the user's WebSocket or app connection closes with ``code``, the agent drops its end)."""
    frame = CLOSE + close_item(code, reason)
    with client.pipeline(transaction=False) as pipe:
        for side in ("user", "agent"):
            pipe.rpush(f"{PREFIX}{tunnel_id}:to-{side}", frame)
            pipe.expire(f"{PREFIX}{tunnel_id}:to-{side}", KEY_TTL_SECONDS)
        pipe.hdel(holders_key(workspace_id), tunnel_id)
        pipe.execute()


class TunnelHalf:
    """One side ("user" or "agent") of a tunnel: pushes to the peer's list, pops its own. A user's half with a
    ``holder`` is listed under its workspace while it beats, so that losing access closes it."""

    def __init__(self, client: redis.Redis, tunnel_id: str, side: str, holder: Holder | None = None) -> None:
        other = "agent" if side == "user" else "user"
        self.client = client
        self.tunnel_id = tunnel_id
        self.inbound = f"{PREFIX}{tunnel_id}:to-{side}"
        self.outbound = f"{PREFIX}{tunnel_id}:to-{other}"
        self.alive_key = f"{PREFIX}{tunnel_id}:alive-{side}"
        self.peer_alive_key = f"{PREFIX}{tunnel_id}:alive-{other}"
        self._buffer: list[bytes] = []
        self.holder = holder
        # A user's half: the agent's unanswered dials, which hold this tunnel's dial until the agent answers it.
        self.pending_dials: str | None = None

    def push(self, *frames: bytes) -> None:
        """Frames (a kind byte, then the payload) for the peer, in one round trip however many."""
        with self.client.pipeline(transaction=False) as pipe:
            pipe.rpush(self.outbound, *frames)
            pipe.expire(self.outbound, KEY_TTL_SECONDS)
            length, _ = pipe.execute()
        if length > HIGH_WATER_ITEMS:
            self._wait_for_drain()

    def _wait_for_drain(self) -> None:
        deadline, delay = time.monotonic() + STALL_SECONDS, 0.001
        while int(self.client.llen(self.outbound)) > LOW_WATER_ITEMS:
            if time.monotonic() > deadline or not self.peer_alive():
                raise TunnelBroken("the other side of the tunnel stopped reading")
            time.sleep(delay)
            delay = min(delay * 2, 0.05)

    def pop(self, timeout: float) -> Item | None:
        """The next frame from the peer, or None after ``timeout``.

        One round trip takes up to POP_BATCH frames: BLPOP waits for the first, and the LPOP pipelined behind it
        (Redis runs it once BLPOP returns) takes what else is queued."""
        if not self._buffer:
            with self.client.pipeline(transaction=False) as pipe:
                pipe.blpop([self.inbound], timeout=timeout)
                pipe.lpop(self.inbound, POP_BATCH - 1)
                first, rest = pipe.execute()
            if first is None:
                return None
            self._buffer = [bytes(first[1]), *(rest or [])]
        raw = self._buffer.pop(0)
        return Item(raw[:1], raw[1:])

    def beat(self) -> None:
        self.client.set(self.alive_key, b"1", ex=ALIVE_TTL_SECONDS)
        if self.holder is not None:
            hold(self.client, self.tunnel_id, self.holder)

    def peer_alive(self) -> bool:
        return bool(self.client.exists(self.peer_alive_key))

    def cleanup(self) -> None:
        self.client.delete(self.inbound, self.alive_key)
        if self.holder is not None:
            release(self.client, self.tunnel_id, self.holder)


class Endpoint(Protocol):
    """What a tunnel half relays to: a WebSocket, or a local socket (:class:`SocketEndpoint`)."""

    def receive(self, timeout: float | None = None) -> bytes | str | None: ...

    def send(self, data: bytes | str) -> None: ...

    def close(self, code: int = CLOSE_NORMAL, reason: str = "") -> None: ...


@dataclass
class TunnelEnd:
    """How a relay ended, for the connection log: its own end closed (``by_endpoint``), the peer sent a close
    (``peer_code``), or neither (the peer went silent, Redis failed: ``broken``). The first to happen wins."""

    by_endpoint: bool = False
    peer_code: int | None = None
    broken: bool = False

    def settled(self) -> bool:
        return self.by_endpoint or self.peer_code is not None or self.broken


def relay(
    endpoint: Endpoint, half: TunnelHalf, draining: Callable[[], bool] | None = None, end: TunnelEnd | None = None
) -> TunnelEnd:
    """Pump until either side closes: the endpoint's frames to the peer, the peer's frames to the endpoint.

    Once ``draining()`` (this replica was told to stop) the tunnel ends on both sides with 4503 "server
    restarting", within a pop's wait: the person's client says why and opens it again at once, through a replica
    that stays, instead of seeing the connection cut when this one stops (an SSH client's bare exit 255).

    ``end`` (returned) is settled before the endpoint is closed: whoever reads the endpoint's end of file can tell
    how the tunnel ended from it at once."""
    end = end if end is not None else TunnelEnd()
    finished = threading.Event()
    reader = threading.Thread(
        target=_forward, args=(endpoint, half, finished, end), name=f"tunnel-{half.tunnel_id[:8]}", daemon=True
    )
    reader.start()
    last_beat = time.monotonic()
    try:
        while not finished.is_set():
            if draining is not None and draining():
                _settle(end, peer_code=CLOSE_SERVER_RESTARTING)
                half.push(CLOSE + close_item(CLOSE_SERVER_RESTARTING, SERVER_RESTARTING_REASON))
                endpoint.close(CLOSE_SERVER_RESTARTING, SERVER_RESTARTING_REASON)
                break
            if time.monotonic() - last_beat > ALIVE_EVERY_SECONDS:
                last_beat = time.monotonic()
                if not _beat(endpoint, half):
                    _settle(end, broken=True)
                    break
            item = half.pop(POP_TIMEOUT_SECONDS)
            if item is not None and item.kind == CLOSE:  # before delivering it: closing the endpoint is ours
                _settle(end, peer_code=parse_close(item.payload)[0])
            if item is not None and not _deliver(endpoint, item):
                break
    except WebSocketClosed:
        _settle(end, by_endpoint=True)
    except (redis.RedisError, OSError):
        _settle(end, broken=True)
    finally:
        finished.set()
        endpoint.close(CLOSE_NORMAL)
        reader.join(timeout=POP_TIMEOUT_SECONDS * 2)
        # Its keys expire by themselves: a Redis that failed (or a client closed under an idle pooled connection's
        # relay, which redis-py reports as ValueError) must not turn a broken tunnel's end into a thread's crash.
        with contextlib.suppress(redis.RedisError, OSError, ValueError):
            half.cleanup()
    return end


def _settle(end: TunnelEnd, *, by_endpoint: bool = False, peer_code: int | None = None, broken: bool = False) -> None:
    if not end.settled():
        end.by_endpoint, end.peer_code, end.broken = by_endpoint, peer_code, broken


def _forward(endpoint: Endpoint, half: TunnelHalf, finished: threading.Event, end: TunnelEnd) -> None:
    """The endpoint's frames to the peer, those already arrived together; when it closes, the peer is told how."""
    frames: list[bytes] = []
    try:
        while not finished.is_set():
            message = endpoint.receive(timeout=POP_TIMEOUT_SECONDS)
            while message is not None:
                frames.append(DATA + message if isinstance(message, bytes) else TEXT + message.encode())
                if len(frames) >= PUSH_BATCH:
                    break
                message = endpoint.receive(timeout=0)
            if frames:
                half.push(*frames)
                frames = []
    except WebSocketClosed as closed:
        if not finished.is_set():  # closed by the relay itself (the peer's close) is not the endpoint's doing
            _settle(end, by_endpoint=True)
        half.push(*frames, CLOSE + close_item(closed.code or CLOSE_NORMAL, closed.reason))
    except (TunnelBroken, redis.RedisError) as exc:
        _settle(end, broken=True)
        endpoint.close(CLOSE_NO_ANSWER, str(exc))
    finally:
        finished.set()


def alive_user_halves(client: redis.Redis, tunnel_ids: list[str]) -> set[str]:
    """Which of these tunnels' user halves still beat (a replica that died stops beating: its key expires)."""
    if not tunnel_ids:
        return set()
    with client.pipeline(transaction=False) as pipe:
        for tunnel_id in tunnel_ids:
            pipe.exists(f"{PREFIX}{tunnel_id}:alive-user")
        found = pipe.execute()
    return {tunnel_id for tunnel_id, alive in zip(tunnel_ids, found, strict=True) if alive}


def _beat(endpoint: Endpoint, half: TunnelHalf) -> bool:
    """Keep this half's liveness key; False (after closing the endpoint) when the peer's has expired."""
    half.beat()
    if half.peer_alive():
        return True
    endpoint.close(CLOSE_NO_ANSWER, "the other side of the tunnel went away")
    return False


def _deliver(endpoint: Endpoint, item: Item) -> bool:
    """Hand one of the peer's frames to the endpoint; False once the peer closed the tunnel."""
    if item.kind == DATA:
        endpoint.send(item.payload)
    elif item.kind == TEXT:
        endpoint.send(item.payload.decode())
    elif item.kind == CLOSE:
        endpoint.close(*parse_close(item.payload))
        return False
    return True


@dataclass(frozen=True)
class DialRequest:
    """What to reach inside the workspace: a TCP port, its SSH server, or a new terminal."""

    service: DialService
    host: str = "127.0.0.1"
    port: int = 0
    rows: int = 24
    cols: int = 80
    command: str = ""
    reconnect: str = ""  # the agent's key for a kept terminal session (terminal_session_key), or ""

    def for_tunnel(self, tunnel_id: str) -> Dial:
        return Dial(
            tunnel_id=tunnel_id,
            service=self.service,
            host=self.host,
            port=self.port,
            rows=self.rows,
            cols=self.cols,
            command=self.command,
            reconnect=self.reconnect,
        )


def terminal_session_key(signer: Signer, user_id: str, agent_id: str, client_id: str) -> str:
    """The agent's name for the terminal session a browser calls ``client_id``: another user, or another agent,
    asking for the same ``client_id`` gets another session; nobody can name a session without the server."""
    return signer.sign("terminal-session", user_id, agent_id, client_id)


def dial(
    client: redis.Redis, signer: Signer, agent_id: str, request: DialRequest, holder: Holder | None = None
) -> TunnelHalf:
    """Ask the agent to dial back (whichever process holds its connection forwards the message, once it has
    checked the signature: nobody else who can write to Redis can make an agent dial). ``holder``: the person
    whose access to the workspace the tunnel depends on."""
    half = TunnelHalf(client, new_id(), "user", holder)
    half.beat()
    # Only the agent asked may take the tunnel's other half: the id alone must not be enough, nor a record that
    # someone else wrote.
    record = f"{agent_id}.{signer.sign('tunnel', half.tunnel_id, agent_id)}"
    message = signed_dial(signer, agent_id, request.for_tunnel(half.tunnel_id))
    half.pending_dials = pending_dials_key(agent_id)
    with client.pipeline(transaction=False) as pipe:
        pipe.set(f"{PREFIX}{half.tunnel_id}:agent", record, ex=int(DIAL_TIMEOUT_SECONDS) + 5)
        # Kept until the agent answers (wait_open): published while the agent is between control connections (its
        # replica drained), a dial reaches nobody, and the connection it opens next passes it on instead.
        pipe.hset(half.pending_dials, half.tunnel_id, message)
        pipe.expire(half.pending_dials, int(DIAL_FRESH_SECONDS) + 5)
        pipe.publish(AGENT_CONTROL_CHANNEL_PREFIX + agent_id, message)
        pipe.execute()
    return half


def pending_dials_key(agent_id: str) -> str:
    return f"{PREFIX}pending-dials:{agent_id}"


def pending_dials(client: redis.Redis, agent_id: str) -> list[bytes]:
    """The agent's dials that no agent has answered yet (signed as published; stale ones are dropped as replays)."""
    messages: list[bytes | str] = client.hvals(pending_dials_key(agent_id))
    return [message.encode() if isinstance(message, str) else message for message in messages]


def take_agent_half(client: redis.Redis, tunnel_id: str) -> bool:
    """True for the first agent connection to take the tunnel's other half: a dial passed on again by a new control
    connection may be one the agent had already answered."""
    return bool(client.set(f"{PREFIX}{tunnel_id}:taken", b"1", nx=True, ex=int(DIAL_FRESH_SECONDS) + 5))


def signed_dial(signer: Signer, agent_id: str, dial: Dial, issued_at: float | None = None) -> str:
    body = dial.dumps()
    issued = f"{issued_at if issued_at is not None else time.time():.3f}"
    return json.dumps({"dial": body, "issued_at": issued, "signature": signer.sign("dial", agent_id, issued, body)})


def verified_dial(signer: Signer, agent_id: str, message: bytes) -> Dial | None:
    """The dial to pass on to the agent, when ``message`` is one the server signed for this agent within
    :data:`DIAL_FRESH_SECONDS`; None for anything else (forged, for another agent, replayed late, malformed).
    A copy replayed while still fresh passes here: the control connection drops dials it already passed on."""
    try:
        data = json.loads(message)
        body, issued, signature = data["dial"], data["issued_at"], data["signature"]
        if not (isinstance(body, str) and isinstance(issued, str) and isinstance(signature, str)):
            return None
        fresh = abs(time.time() - float(issued)) <= DIAL_FRESH_SECONDS
        dial = Dial.loads(body)  # what the agent gets is a well-formed dial
    except (ValueError, KeyError, TypeError, ProtocolError):
        return None
    return dial if fresh and signer.verify(signature, "dial", agent_id, issued, body) else None


def wait_open(half: TunnelHalf, timeout: float = DIAL_TIMEOUT_SECONDS) -> tuple[int, str] | None:
    """None once the agent's half is open; else the close code and reason (its dial failed, or no answer)."""
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            item = half.pop(min(POP_TIMEOUT_SECONDS, max(deadline - time.monotonic(), 0.01)))
            if item is None:
                continue
            if item.kind == OPEN:
                return None
            if item.kind == CLOSE:
                return parse_close(item.payload)
    finally:
        if half.pending_dials is not None:  # answered or given up: no connection is to pass it on any more
            half.client.hdel(half.pending_dials, half.tunnel_id)
    half.cleanup()
    return CLOSE_NO_ANSWER, f"The workspace agent did not answer within {timeout:.0f} s."


def dialed_to(client: redis.Redis, signer: Signer, tunnel_id: str, agent_id: str) -> bool:
    """Was this tunnel dialed to this agent by the server (the record is signed: writing one into Redis is not
    enough to take the other half of someone's tunnel)?"""
    asked = client.get(f"{PREFIX}{tunnel_id}:agent")
    if not isinstance(asked, bytes):
        return False
    recorded_agent, _, signature = asked.decode(errors="replace").partition(".")
    return recorded_agent == agent_id and signer.verify(signature, "tunnel", tunnel_id, agent_id)


def agent_half(client: redis.Redis, tunnel_id: str, error: str | None) -> TunnelHalf:
    """The agent's half, announced to the user's half: open, or closed with the agent's dial error."""
    half = TunnelHalf(client, tunnel_id, "agent")
    half.beat()
    half.push(CLOSE + close_item(CLOSE_DIAL_FAILED, error) if error else OPEN)
    return half


class SocketEndpoint:
    """A local stream socket as a tunnel endpoint: its EOF becomes an ``eof`` message, and the peer's ``eof``
    shuts down writing (TCP half-close), as WebSocket tunnel ends do (agent/README.md)."""

    EOF = json.dumps({"type": "eof"})

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._read_closed = False
        self._write_closed = False
        self._closed = threading.Event()
        # Held while the relay's reader waits on the socket and reads it: the socket is closed only under it
        # (release), never between the reader's select and its recv nor before its next select, which on a closed
        # socket (fd -1) raises ValueError in the reader thread instead of ending the tunnel.
        self._in_use = threading.Lock()
        self._released = False

    def receive(self, timeout: float | None = None) -> bytes | str | None:
        if self._read_closed:
            if self._closed.wait(timeout):
                raise WebSocketClosed(CLOSE_NORMAL)
            return None
        with self._in_use:
            if self._released:
                raise WebSocketClosed(CLOSE_NORMAL, "local connection closed")
            readable, _, _ = select.select([self.sock], [], [], timeout)
            if not readable:
                return None
            try:
                data = self.sock.recv(256 * 1024)
            except OSError:
                data = b""
        if data:
            return data
        self._read_closed = True
        if self._write_closed:
            raise WebSocketClosed(CLOSE_NORMAL)
        return self.EOF

    def send(self, data: bytes | str) -> None:
        if isinstance(data, bytes):
            try:
                self.sock.sendall(data)
            except OSError as exc:
                raise WebSocketClosed(CLOSE_NORMAL, "local connection closed") from exc
            return
        if json.loads(data).get("type") == "eof":
            self._write_closed = True
            try:
                self.sock.shutdown(socket.SHUT_WR)
            except OSError:
                pass
            if self._read_closed:
                self._closed.set()

    def close(self, code: int = CLOSE_NORMAL, reason: str = "") -> None:
        self._closed.set()
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def release(self) -> None:
        """Close the socket for good, from any thread: shut down first, which wakes a reader waiting on it, then
        closed once no read is under way; the relay then ends as if the local side had closed."""
        self.close()
        with self._in_use:
            self._released = True
            self.sock.close()
