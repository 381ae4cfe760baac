"""Lifecycle reports (README ``POST /lifecycle``, reference §1.3), delivered in order, each retried until the
server takes it, so that a server that is briefly away still sees ``starting`` before ``ready``."""

from __future__ import annotations

import asyncio
import logging

from agent.api import AgentAPI, AgentAPIError, ProblemLog, retry, utc_now
from protocol.agentapi import LifecycleState

log = logging.getLogger(__name__)

CREATED: LifecycleState = "created"
STARTING: LifecycleState = "starting"
READY: LifecycleState = "ready"
START_TIMEOUT: LifecycleState = "start_timeout"
START_ERROR: LifecycleState = "start_error"
SHUTTING_DOWN: LifecycleState = "shutting_down"
OFF: LifecycleState = "off"
SHUTDOWN_TIMEOUT: LifecycleState = "shutdown_timeout"
SHUTDOWN_ERROR: LifecycleState = "shutdown_error"


class LifecycleReporter:
    def __init__(self, api: AgentAPI, problems: ProblemLog | None = None) -> None:
        self._api = api
        self._problems = problems or ProblemLog(log)
        self._queue: asyncio.Queue[tuple[LifecycleState, str]] = asyncio.Queue()
        self._idle = asyncio.Event()
        self._idle.set()
        self.state: LifecycleState = CREATED

    def report(self, state: LifecycleState) -> None:
        """Queue a report stamped now; it is sent after the ones before it."""
        log.info("lifecycle: %s", state)
        self.state = state
        self._idle.clear()
        self._queue.put_nowait((state, utc_now()))

    async def _send(self, state: LifecycleState, changed_at: str) -> None:
        try:
            await retry(lambda: self._api.post_lifecycle(state, changed_at), self._problems)
        except AgentAPIError as exc:
            log.warning("the server refused the lifecycle state %s: %s", state, exc)

    async def run(self) -> None:
        """Deliver reports until cancelled."""
        while True:
            state, changed_at = await self._queue.get()
            await self._send(state, changed_at)
            if self._queue.empty():
                self._idle.set()

    async def flush(self, timeout: float) -> bool:
        """Wait at most ``timeout`` seconds for every queued report to be delivered; True if they were."""
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
        except TimeoutError:
            return False
        return True
