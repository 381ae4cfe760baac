"""Script timings (README ``POST /script-timings``): when each script ran and how it ended, sent in the background
in order, each retried while the server is away. A server from before timings answers 404: the agent then stops
sending them (they explain a start, they are not needed for one)."""

from __future__ import annotations

import asyncio
import logging

from agent.api import AgentAPI, AgentAPIError, ProblemLog, retry
from protocol.timings import ScriptTiming

log = logging.getLogger(__name__)


class ScriptTimingReporter:
    def __init__(self, api: AgentAPI, problems: ProblemLog | None = None) -> None:
        self._api = api
        self._problems = problems or ProblemLog(log)
        self._queue: asyncio.Queue[ScriptTiming] = asyncio.Queue()
        self._idle = asyncio.Event()
        self._idle.set()
        self._unsupported = False

    def report(self, timing: ScriptTiming) -> None:
        if self._unsupported:
            return
        self._idle.clear()
        self._queue.put_nowait(timing)

    async def run(self) -> None:
        """Deliver timings until cancelled."""
        while True:
            timing = await self._queue.get()
            if not self._unsupported:
                await self._send(timing)
            if self._queue.empty():
                self._idle.set()

    async def _send(self, timing: ScriptTiming) -> None:
        try:
            await retry(lambda: self._api.post_script_timing(timing), self._problems)
        except AgentAPIError as exc:
            if exc.status == 404:
                log.info("the server does not take script timings (an older release): not sending them")
                self._unsupported = True
            else:
                log.warning("the server refused the timing of script %s: %s", timing.log_source_id, exc)

    async def flush(self, timeout: float) -> bool:
        """Wait at most ``timeout`` seconds for every queued timing to be delivered; True if they were."""
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
        except TimeoutError:
            return False
        return True
