"""The agent's side of the protocol: REST calls and WebSockets under ``/api/v2/workspaceagents/me``.

Each call makes one attempt and raises :class:`ServerUnavailable` when it is worth retrying (401, the server
unreachable or answering 5xx) or :class:`AgentAPIError` when it is not; :func:`retry` adds the back-off of the
README and logs each distinct problem once.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, TypeVar
from urllib.parse import quote

import httpx
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import InvalidHandshake, InvalidStatus

from protocol.agentapi import (
    API_PREFIX,
    TOKEN_HEADER,
    AgentLogBatch,
    AgentLogReply,
    AppHealth,
    AppHealthReport,
    ExternalAuthReply,
    GitSSHKeyReply,
    LifecycleReport,
    LifecycleState,
    ListeningPort,
    ListeningPortsReport,
    Manifest,
    MetadataReport,
    Startup,
)
from protocol.codec import Message, ProtocolError
from protocol.timings import ScriptTiming

log = logging.getLogger(__name__)

T = TypeVar("T")
HTTP_TIMEOUT = 30.0  # Coder's agent client uses the same
# A listening external-auth request is held by the server for up to 50 s.
LISTEN_TIMEOUT = 75.0
CONTROL_PING_INTERVAL = 15.0
CONTROL_PING_TIMEOUT = 30.0
TUNNEL_MAX_MESSAGE = 16 * 1024 * 1024


class AgentAPIError(Exception):
    """The server refused a call for a reason retrying will not fix."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status} {message}")
        self.status = status
        self.message = message


class ServerUnavailable(Exception):
    """The server cannot take the call now (401, unreachable, 5xx); ``problem`` says why in one line."""

    def __init__(self, problem: str) -> None:
        super().__init__(problem)
        self.problem = problem


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class Backoff:
    """Exponential back-off with jitter: 0.5 s doubling up to 10 s by default."""

    def __init__(self, initial: float = 0.5, maximum: float = 10.0) -> None:
        self.initial = initial
        self.maximum = maximum
        self._next = initial

    def next_delay(self) -> float:
        delay = self._next
        self._next = min(self._next * 2, self.maximum)
        # Jitter spreads the retries of many agents after a server restart; it is not a secret.
        return delay * random.uniform(0.75, 1.25)  # noqa: S311

    def reset(self) -> None:
        self._next = self.initial


class ProblemLog:
    """Logs a problem when it first appears or changes, and once when it is over: not one line per retry."""

    def __init__(self, logger: logging.Logger = log) -> None:
        self._logger = logger
        self._current: str | None = None

    def report(self, problem: str) -> None:
        if problem != self._current:
            self._logger.warning("waiting for the server: %s", problem)
            self._current = problem

    def resolved(self) -> None:
        if self._current is not None:
            self._logger.info("the server answers again")
            self._current = None


async def retry(
    operation: Callable[[], Awaitable[T]],
    problems: ProblemLog,
    *,
    backoff: Backoff | None = None,
    deadline: float | None = None,
) -> T:
    """Call ``operation`` until it does not raise :class:`ServerUnavailable`, or until ``deadline`` (monotonic)."""
    backoff = backoff or Backoff()
    while True:
        try:
            result = await operation()
        except ServerUnavailable as exc:
            problems.report(exc.problem)
            delay = backoff.next_delay()
            if deadline is not None and time.monotonic() + delay > deadline:
                raise
            await asyncio.sleep(delay)
        else:
            problems.resolved()
            return result


def _error_message(status: int, body: bytes | str) -> str:
    try:
        data = json.loads(body)
    except (ValueError, TypeError):
        data = None
    if isinstance(data, dict) and isinstance(data.get("message"), str):
        message: str = data["message"]
        if isinstance(data.get("detail"), str) and data["detail"]:
            message += f" ({data['detail']})"
        return message
    text = body.decode(errors="replace") if isinstance(body, bytes) else body
    return text.strip()[:200] or httpx.codes.get_reason_phrase(status)


UNAUTHORIZED = 401


def _raise_for(status: int, body: bytes | str) -> None:
    if status < 400:
        return
    message = _error_message(status, body)
    if status == UNAUTHORIZED or status >= 500 or status in (408, 429):
        raise ServerUnavailable(f"{status} {message}")
    raise AgentAPIError(status, message)


class AgentAPI:
    def __init__(self, url: str, token: str, *, http: httpx.AsyncClient | None = None) -> None:
        self.url = url.rstrip("/")
        self.base = f"{self.url}{API_PREFIX}"
        self._headers = {TOKEN_HEADER: token}
        self._http = http or httpx.AsyncClient(timeout=HTTP_TIMEOUT)
        # Set while the server answers 401 to this token (until a call succeeds): retrying will not change that.
        self.refused = asyncio.Event()

    def use_token(self, token: str) -> None:
        """Authenticate every later call (and connection) with ``token``, which the server handed over."""
        self._headers = {TOKEN_HEADER: token}
        self.refused.clear()

    def _note_answer(self, status: int) -> None:
        if status == UNAUTHORIZED:
            self.refused.set()
        elif status < 400:
            self.refused.clear()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _request(self, method: str, path: str, body: Message | None = None) -> httpx.Response:
        content = body.dumps() if body is not None else None
        headers = {**self._headers, "Content-Type": "application/json"} if content is not None else self._headers
        try:
            response = await self._http.request(method, self.base + path, content=content, headers=headers)
        except httpx.TransportError as exc:
            raise ServerUnavailable(f"cannot reach {self.url}: {exc or type(exc).__name__}") from None
        self._note_answer(response.status_code)
        _raise_for(response.status_code, response.content)
        return response

    async def get_manifest(self) -> Manifest:
        """The manifest; :class:`ProtocolError` when the server sent something that is not one."""
        return Manifest.loads((await self._request("GET", "/manifest")).content)

    async def post_startup(self, version: str, expanded_directory: str) -> None:
        await self._request("POST", "/startup", Startup(version=version[:64], expanded_directory=expanded_directory))

    async def post_lifecycle(self, state: LifecycleState, changed_at: str) -> None:
        await self._request("POST", "/lifecycle", LifecycleReport(state=state, changed_at=changed_at))

    async def post_logs(self, batch: AgentLogBatch) -> bool:
        """Send one batch; returns whether the server's log limit is exceeded."""
        response = await self._request("POST", "/logs", batch)
        try:
            return AgentLogReply.loads(response.content).log_limit_exceeded
        except ProtocolError:
            return False

    async def post_metadata(self, report: MetadataReport) -> None:
        await self._request("POST", "/metadata", report)

    async def post_app_health(self, healths: dict[str, AppHealth]) -> None:
        await self._request("POST", "/app-health", AppHealthReport(healths=healths))

    async def post_script_timing(self, timing: ScriptTiming) -> None:
        await self._request("POST", "/script-timings", timing)

    async def post_listening_ports(self, ports: list[ListeningPort]) -> None:
        await self._request("POST", "/listening-ports", ListeningPortsReport(ports=tuple(ports)))

    async def get_external_auth(
        self, *, match: str = "", provider_id: str = "", listen: bool = False
    ) -> ExternalAuthReply:
        """The owner's Git token for a remote URL (or provider id); with ``listen`` the server holds the request
        until they link the provider (up to about 50 s)."""
        query = {"match": match, "id": provider_id, "listen": "true" if listen else ""}
        path = "/external-auth?" + "&".join(f"{key}={quote(value, safe='')}" for key, value in query.items() if value)
        timeout = LISTEN_TIMEOUT if listen else HTTP_TIMEOUT
        try:
            response = await self._http.get(self.base + path, headers=self._headers, timeout=timeout)
        except httpx.TransportError as exc:
            raise ServerUnavailable(f"cannot reach {self.url}: {exc or type(exc).__name__}") from None
        self._note_answer(response.status_code)
        _raise_for(response.status_code, response.content)
        return ExternalAuthReply.loads(response.content)

    async def get_git_ssh_key(self) -> GitSSHKeyReply:
        return GitSSHKeyReply.loads((await self._request("GET", "/gitsshkey")).content)

    def _websocket_url(self, path: str) -> str:
        return "ws" + self.base.removeprefix("http") + path

    async def _open_websocket(self, path: str, **options: Any) -> ClientConnection:
        try:
            websocket = await connect(self._websocket_url(path), additional_headers=self._headers, **options)
        except InvalidStatus as exc:
            response = exc.response
            self._note_answer(response.status_code)
            _raise_for(response.status_code, bytes(response.body or b""))
            raise ServerUnavailable(f"{response.status_code}: the server refused the WebSocket") from None
        except (OSError, TimeoutError, InvalidHandshake) as exc:
            raise ServerUnavailable(f"cannot reach {self.url}: {exc or type(exc).__name__}") from None
        self.refused.clear()
        return websocket

    async def connect_control(self) -> ClientConnection:
        """The control connection; the library answers the server's pings, and pings the server itself."""
        return await self._open_websocket(
            "/rpc", ping_interval=CONTROL_PING_INTERVAL, ping_timeout=CONTROL_PING_TIMEOUT
        )

    async def open_tunnel(self, tunnel_id: str, error: str | None = None) -> ClientConnection:
        """The agent's half of a tunnel; with ``error`` it tells the server why dialling failed."""
        path = f"/tunnels/{quote(tunnel_id, safe='')}"
        if error is not None:
            path += f"?error={quote(error[:500], safe='')}"
        # Tunnels carry SSH and other already-compressed streams: deflate would only cost CPU.
        return await self._open_websocket(path, compression=None, max_size=TUNNEL_MAX_MESSAGE)
