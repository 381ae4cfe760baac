"""Script output on its way to ``POST /logs``, batched as the README says.

A batch leaves every second, or as soon as 1,000 lines or 512 KiB are queued. At most 1 MiB waits in memory;
beyond that the oldest lines are dropped and one warning line per log source says how many. Failed sends are
retried with 1-5 s back-off; once the server answers ``log_limit_exceeded`` nothing more is sent.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable

from agent.api import AgentAPIError, Backoff, ServerUnavailable, utc_now
from protocol.agentapi import AgentLogBatch, AgentLogLine, LogLevel

log = logging.getLogger(__name__)

LEVELS = ("trace", "debug", "info", "warn", "error")
FLUSH_INTERVAL = 1.0
BATCH_MAX_LINES = 1000
BATCH_MAX_BYTES = 512 * 1024
QUEUE_MAX_BYTES = 1024 * 1024
# A single line longer than this is cut: one huge line must not make a batch the server refuses (413).
LINE_MAX_CHARS = 64 * 1024

SendBatch = Callable[[AgentLogBatch], Awaitable[bool]]


def log_line(output: str, level: str, log_source_id: str, created_at: str = "") -> AgentLogLine:
    """A line to send: an unknown level is "info", the time is now unless given."""
    known: LogLevel = level if level in LEVELS else "info"  # type: ignore[assignment]  # checked just now
    return AgentLogLine(output=output, level=known, log_source_id=log_source_id, created_at=created_at or utc_now())


def _encoded_size(entry: AgentLogLine) -> int:
    # Counting the JSON form (escapes included) keeps a batch under the server's 1 MiB body limit.
    return len(entry.dumps().encode()) + 2


class LogSender:
    def __init__(
        self,
        send_batch: SendBatch,
        *,
        flush_interval: float = FLUSH_INTERVAL,
        batch_max_lines: int = BATCH_MAX_LINES,
        batch_max_bytes: int = BATCH_MAX_BYTES,
        queue_max_bytes: int = QUEUE_MAX_BYTES,
        retry_backoff: Callable[[], Backoff] = lambda: Backoff(initial=1.0, maximum=5.0),
    ) -> None:
        self._send_batch = send_batch
        self._flush_interval = flush_interval
        self._batch_max_lines = batch_max_lines
        self._batch_max_bytes = batch_max_bytes
        self._queue_max_bytes = queue_max_bytes
        self._retry_backoff = retry_backoff
        self._queue: deque[tuple[AgentLogLine, int]] = deque()
        self._queued_bytes = 0
        self._dropped: dict[str, int] = {}
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._sending_lines = 0
        self.limit_exceeded = False

    @property
    def unsent_lines(self) -> int:
        """Lines not yet taken by the server: those queued and those of the batch being sent."""
        return len(self._queue) + self._sending_lines

    def add(self, given: AgentLogLine) -> None:
        if self.limit_exceeded:
            return
        output = given.output if len(given.output) <= LINE_MAX_CHARS else given.output[:LINE_MAX_CHARS] + " …(cut)"
        entry = log_line(output, given.level, given.log_source_id, given.created_at)
        size = _encoded_size(entry)
        self._queue.append((entry, size))
        self._queued_bytes += size
        while self._queued_bytes > self._queue_max_bytes and len(self._queue) > 1:
            dropped, dropped_size = self._queue.popleft()
            self._queued_bytes -= dropped_size
            source = dropped.log_source_id
            self._dropped[source] = self._dropped.get(source, 0) + 1
        self._idle.clear()
        if len(self._queue) >= self._batch_max_lines or self._queued_bytes >= self._batch_max_bytes:
            self._wake.set()

    def _note_dropped_lines(self) -> None:
        """Put one warning per source that lost lines at the head of the queue, where the lost lines were."""
        for source, count in self._dropped.items():
            warning = log_line(
                f"{count} older log lines were dropped: the agent could not send them to the server fast enough",
                "warn",
                source,
            )
            size = _encoded_size(warning)
            self._queue.appendleft((warning, size))
            self._queued_bytes += size
        self._dropped.clear()

    def _take_batch(self) -> list[AgentLogLine]:
        self._note_dropped_lines()
        batch: list[AgentLogLine] = []
        batch_bytes = 0
        while self._queue and len(batch) < self._batch_max_lines:
            entry, size = self._queue[0]
            if batch and batch_bytes + size > self._batch_max_bytes:
                break
            self._queue.popleft()
            self._queued_bytes -= size
            batch.append(entry)
            batch_bytes += size
        return batch

    async def _deliver(self, batch: list[AgentLogLine]) -> None:
        backoff = self._retry_backoff()
        while True:
            try:
                exceeded = await self._send_batch(AgentLogBatch(logs=tuple(batch)))
            except ServerUnavailable as exc:
                log.debug("sending %d log lines failed (%s); retrying", len(batch), exc.problem)
            except AgentAPIError as exc:
                # 413 and other refusals: the batch would never be accepted, so it is dropped (as Coder does).
                log.warning("the server refused %d log lines (%s); dropping them", len(batch), exc)
                return
            else:
                if exceeded:
                    self._stop_sending()
                return
            await asyncio.sleep(backoff.next_delay())

    def _stop_sending(self) -> None:
        log.warning("the server's log limit for this agent is reached; script output is no longer sent")
        self.limit_exceeded = True
        self._queue.clear()
        self._queued_bytes = 0
        self._dropped.clear()

    async def run(self) -> None:
        """Send batches until cancelled."""
        while True:
            try:
                await asyncio.wait_for(self._wake.wait(), self._flush_interval)
            except TimeoutError:
                pass
            self._wake.clear()
            while (self._queue or self._dropped) and not self.limit_exceeded:
                batch = self._take_batch()
                self._sending_lines = len(batch)
                try:
                    await self._deliver(batch)
                finally:
                    self._sending_lines = 0
            if not self._queue:
                self._idle.set()

    async def flush(self, timeout: float) -> bool:
        """Wait until everything queued so far is sent, at most ``timeout`` seconds; True if it all went."""
        deadline = time.monotonic() + timeout
        self._wake.set()
        try:
            await asyncio.wait_for(self._idle.wait(), max(deadline - time.monotonic(), 0))
        except TimeoutError:
            return False
        return True
