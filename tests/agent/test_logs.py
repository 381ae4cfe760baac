"""The batching log sender, against an in-memory recording sink."""

from __future__ import annotations

import asyncio
import json

from agent.api import AgentAPIError, Backoff, ServerUnavailable
from agent.logs import LogSender, log_line
from protocol.agentapi import AgentLogBatch, AgentLogLine
from tests.agent.support import run


class Sink:
    """Records each batch; ``failures`` makes the first calls raise, ``exceeded`` makes it answer the limit."""

    def __init__(self, failures: list[Exception] | None = None, exceeded: bool = False) -> None:
        self.batches: list[list[dict[str, str]]] = []
        self.failures = list(failures or [])
        self.exceeded = exceeded

    async def __call__(self, batch: AgentLogBatch) -> bool:
        if self.failures:
            raise self.failures.pop(0)
        self.batches.append([dict(entry.to_json()) for entry in batch.logs])
        return self.exceeded

    @property
    def outputs(self) -> list[str]:
        return [entry["output"] for batch in self.batches for entry in batch]


def quick_retries() -> Backoff:
    return Backoff(initial=0.01, maximum=0.05)


def line(text: str, level: str = "info", source: str = "s1") -> AgentLogLine:
    return log_line(text, level, source)


def test_lines_leave_within_a_second_with_their_fields() -> None:
    sink = Sink()

    async def scenario() -> float:
        sender = LogSender(sink)
        task = asyncio.create_task(sender.run())
        started = asyncio.get_running_loop().time()
        sender.add(line("hello", "warn"))
        while not sink.batches:
            await asyncio.sleep(0.02)
        task.cancel()
        return asyncio.get_running_loop().time() - started

    assert run(scenario()) < 1.5
    (entry,) = sink.batches[0]
    assert entry["output"] == "hello"
    assert entry["level"] == "warn"
    assert entry["log_source_id"] == "s1"
    assert entry["created_at"].endswith("Z")


def test_batches_hold_at_most_1000_lines_and_leave_at_once_when_full() -> None:
    sink = Sink()

    async def scenario() -> None:
        sender = LogSender(sink, flush_interval=60)  # only a full batch may trigger a send here
        task = asyncio.create_task(sender.run())
        for number in range(2500):
            sender.add(line(f"line {number}"))
        while sum(len(batch) for batch in sink.batches) < 2000:
            await asyncio.sleep(0.02)
        assert await sender.flush(5)
        task.cancel()

    run(scenario(), timeout=20)
    assert [len(batch) for batch in sink.batches] == [1000, 1000, 500]
    assert sink.outputs == [f"line {number}" for number in range(2500)]


def test_batches_stay_under_512_kib() -> None:
    sink = Sink()

    async def scenario() -> None:
        sender = LogSender(sink, flush_interval=60)
        task = asyncio.create_task(sender.run())
        for number in range(30):
            sender.add(line(f"{number}:" + "x" * 60_000))
            await asyncio.sleep(0.01)  # a script writing steadily, the sender keeping up
        assert await sender.flush(5)
        task.cancel()

    run(scenario())
    for batch in sink.batches:
        assert len(json.dumps({"logs": batch})) <= 512 * 1024 + 1024
    assert len(sink.outputs) == 30
    assert len(sink.batches) >= 4


def test_beyond_1_mib_queued_the_oldest_lines_go_with_one_warning_per_source() -> None:
    sink = Sink()

    async def scenario() -> None:
        sender = LogSender(sink, flush_interval=60, batch_max_bytes=10 * 1024 * 1024, batch_max_lines=10**6)
        for number in range(400):  # about 2 MiB, queued while nothing is sending
            sender.add(line(f"{number}:" + "y" * 5000, source="a" if number % 2 else "b"))
        task = asyncio.create_task(sender.run())
        assert await sender.flush(5)
        task.cancel()

    run(scenario())
    outputs = sink.outputs
    warnings = [entry for batch in sink.batches for entry in batch if entry["level"] == "warn"]
    assert len(warnings) == 2
    assert {warning["log_source_id"] for warning in warnings} == {"a", "b"}
    assert all("older log lines were dropped" in warning["output"] for warning in warnings)
    kept = [text for text in outputs if not text.endswith("fast enough")]
    assert kept[-1].startswith("399:")  # the newest lines are the ones kept
    assert 150 < len(kept) < 250


def test_failed_sends_are_retried_and_413_drops_the_batch() -> None:
    sink = Sink(failures=[ServerUnavailable("503 busy"), ServerUnavailable("cannot reach")])

    async def scenario() -> None:
        sender = LogSender(sink, flush_interval=0.05, retry_backoff=quick_retries)
        task = asyncio.create_task(sender.run())
        sender.add(line("kept"))
        assert await sender.flush(5)
        sink.failures.append(AgentAPIError(413, "too large"))
        sender.add(line("refused"))
        assert await sender.flush(5)
        sender.add(line("after"))
        assert await sender.flush(5)
        task.cancel()

    run(scenario())
    assert sink.outputs == ["kept", "after"]


def test_nothing_more_is_sent_once_the_log_limit_is_exceeded() -> None:
    sink = Sink(exceeded=True)

    async def scenario() -> bool:
        sender = LogSender(sink, flush_interval=0.05)
        task = asyncio.create_task(sender.run())
        sender.add(line("first"))
        assert await sender.flush(5)
        sender.add(line("second"))
        await asyncio.sleep(0.2)
        task.cancel()
        return sender.limit_exceeded

    assert run(scenario())
    assert sink.outputs == ["first"]


def test_flush_gives_up_after_its_timeout() -> None:
    sink = Sink(failures=[ServerUnavailable("401 no agent")] * 1000)

    async def scenario() -> tuple[bool, int]:
        sender = LogSender(sink, flush_interval=0.05, retry_backoff=quick_retries)
        task = asyncio.create_task(sender.run())
        sender.add(line("stuck"))
        flushed = await sender.flush(0.5)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return flushed, len(sink.batches)

    assert run(scenario()) == (False, 0)


def test_a_huge_line_is_cut() -> None:
    sink = Sink()

    async def scenario() -> None:
        sender = LogSender(sink)
        task = asyncio.create_task(sender.run())
        sender.add(line("z" * 200_000))
        assert await sender.flush(5)
        task.cancel()

    run(scenario())
    (output,) = sink.outputs
    assert len(output) < 70_000
    assert output.endswith("(cut)")
