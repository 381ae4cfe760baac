"""App health checks (README "App health", reference §1.7).

Every ``interval`` seconds the app's healthcheck URL is fetched (5 s timeout); a status below 500 is a success,
as in Coder, unless the URL's fragment asks for more (``#expect=2xx``: a refused request counts as a failure,
protocol/healthchecks.py). A ``ws://`` or ``wss://`` URL asks for a WebSocket upgrade there, which must be accepted
(101), so an app whose pages load while its WebSockets are refused counts as unhealthy.
``threshold`` consecutive failures make the app ``unhealthy``, one success makes it ``healthy``, and it stays
``initializing`` until one of those happens. The states of all apps go to ``POST /app-health`` when one changes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from urllib.parse import urlsplit

import httpx
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidHandshake

from agent.api import AgentAPIError, Backoff, ServerUnavailable
from protocol.agentapi import AppHealth
from protocol.healthchecks import WEBSOCKET_SCHEMES, BadExpectation, status_rule
from protocol.resources import App, Healthcheck

log = logging.getLogger(__name__)

CHECK_TIMEOUT = 5.0
INITIALIZING: AppHealth = "initializing"
HEALTHY: AppHealth = "healthy"
UNHEALTHY: AppHealth = "unhealthy"

PostHealths = Callable[[dict[str, AppHealth]], Awaitable[None]]


async def probe(client: httpx.AsyncClient, url: str) -> bool:
    if urlsplit(url).scheme in WEBSOCKET_SCHEMES:
        return await probe_websocket(url, client.timeout.connect or CHECK_TIMEOUT)
    try:
        rule = status_rule(url)
    except BadExpectation as exc:  # the server refuses such templates; an older one's check fails rather than pass
        log.warning("health check of %s cannot pass: %s", url, exc)
        return False
    try:
        response = await client.get(url)  # the fragment stays here: HTTP clients never send it
    except httpx.HTTPError as exc:
        log.debug("health check of %s failed: %s", url, exc)
        return False
    if not rule.passes(response.status_code):
        log.debug("health check of %s failed: status %d", url, response.status_code)
        return False
    return True


async def probe_websocket(url: str, timeout: float) -> bool:
    """Whether the app accepts a WebSocket at ``url``: the upgrade answered 101 within ``timeout`` (then closed)."""
    try:
        # No proxy from the environment: the checked service is the workspace's own.
        async with connect(url, open_timeout=timeout, close_timeout=1, proxy=None):
            return True
    except (OSError, InvalidHandshake, TimeoutError) as exc:
        log.debug("WebSocket health check of %s failed: %s", url, exc)
        return False


class HealthTracker:
    """The state machine of one app: consecutive failures against the threshold."""

    def __init__(self, threshold: int) -> None:
        self.threshold = max(threshold, 1)
        self.state: AppHealth = INITIALIZING
        self._failures = 0

    def record(self, success: bool) -> bool:
        """Record one check; True when the state changed."""
        before = self.state
        if success:
            self._failures = 0
            self.state = HEALTHY
        else:
            self._failures += 1
            if self._failures >= self.threshold:
                self.state = UNHEALTHY
        return self.state != before


class AppHealthReporter:
    def __init__(self, apps: Sequence[App], post: PostHealths, *, timeout: float = CHECK_TIMEOUT) -> None:
        self._checks: dict[str, Healthcheck] = {app.slug: app.healthcheck for app in apps if app.healthcheck}
        self._trackers = {slug: HealthTracker(check.threshold) for slug, check in self._checks.items()}
        self._post = post
        self._timeout = timeout
        self._changed = asyncio.Event()

    @property
    def healths(self) -> dict[str, AppHealth]:
        return {slug: tracker.state for slug, tracker in self._trackers.items()}

    async def _check_forever(self, client: httpx.AsyncClient, slug: str, check: Healthcheck) -> None:
        interval = max(check.interval, 1)
        while True:
            if self._trackers[slug].record(await probe(client, check.url)):
                log.info("app %r is %s", slug, self._trackers[slug].state)
                self._changed.set()
            await asyncio.sleep(interval)

    async def _report_forever(self) -> None:
        backoff = Backoff(initial=1.0, maximum=5.0)
        while True:
            await self._changed.wait()
            self._changed.clear()
            try:
                await self._post(self.healths)
            except ServerUnavailable as exc:
                log.debug("app health not sent (%s); retrying", exc.problem)
                self._changed.set()
                await asyncio.sleep(backoff.next_delay())
            except AgentAPIError as exc:
                log.warning("the server refused app health: %s", exc)
            else:
                backoff.reset()

    async def run(self) -> None:
        """Check and report until cancelled."""
        if not self._checks:
            return
        self._changed.set()  # the server learns at once which apps are being checked
        # The checked services are the workspace's own: a proxy from the environment must not stand between.
        async with (
            httpx.AsyncClient(timeout=self._timeout, trust_env=False, follow_redirects=False) as client,
            asyncio.TaskGroup() as group,
        ):
            group.create_task(self._report_forever())
            for slug, check in self._checks.items():
                group.create_task(self._check_forever(client, slug, check))
