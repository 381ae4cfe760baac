"""Metadata scripts as real processes, and results batched to the server about once a second."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from agent.metadata import MetadataCollector, collect
from protocol.agentapi import MetadataReport, MetadataResult
from protocol.resources import AgentMetadata
from tests.agent.support import run


def test_value_is_stripped_stdout(tmp_path: Path) -> None:
    assert run(collect("echo '  42 '", 5, cwd=tmp_path, env=dict(os.environ))) == ("42", "")


def test_error_is_stderr_of_a_failing_script(tmp_path: Path) -> None:
    value, error = run(collect("echo partial; echo broken >&2; exit 2", 5, cwd=tmp_path, env=dict(os.environ)))
    assert (value, error) == ("partial", "broken")
    assert run(collect("exit 4", 5, cwd=tmp_path, env=dict(os.environ))) == ("", "the script exited with status 4")


def test_a_script_over_its_timeout_is_killed(tmp_path: Path) -> None:
    value, error = run(collect("sleep 30", 0.5, cwd=tmp_path, env=dict(os.environ)))
    assert value == ""
    assert "timed out after 0.5 s" in error


def test_collector_sends_each_key_with_the_newest_result(tmp_path: Path) -> None:
    batches: list[list[MetadataResult]] = []
    counter = tmp_path / "counter"

    async def post(report: MetadataReport) -> None:
        batches.append(list(report.metadata))

    async def scenario() -> None:
        collector = MetadataCollector(
            [
                AgentMetadata(key="count", script=f"echo x >> {counter}; wc -l < {counter}", interval=1),
                AgentMetadata(key="fails", script="exit 1", interval=1),
            ],
            post,
            directory=tmp_path,
            environment=lambda: dict(os.environ),
            flush_interval=0.3,
        )
        task = asyncio.create_task(collector.run())
        await asyncio.sleep(2.5)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    run(scenario())
    results = [entry for batch in batches for entry in batch]
    counts = [entry.value for entry in results if entry.key == "count"]
    assert counts[:3] == ["1", "2", "3"]
    failure = next(entry for entry in results if entry.key == "fails")
    assert failure.error == "the script exited with status 1"
    assert all(entry.collected_at.endswith("Z") for entry in results)
    assert all(len({entry.key for entry in batch}) == len(batch) for batch in batches)
