"""The agent's listening-ports reporter: the list goes to the server when it changes, a post the server could not
take is sent again, a refused one is not repeated (the /proc reading is in tests/test_listening_ports.py)."""

from __future__ import annotations

import asyncio

import pytest

from agent import ports
from agent.api import AgentAPIError, ServerUnavailable
from agent.ports import PortReporter
from protocol.agentapi import ListeningPort
from tests.agent.support import run

A = [ListeningPort(process_name="python3", port=8000)]
B = [*A, ListeningPort(process_name="node", port=3000)]


def test_the_list_is_posted_when_it_changes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ports, "SCAN_INTERVAL", 0.01)
    scans = iter([A, A, B, B, B, B])
    outcomes: list[Exception | None] = [ServerUnavailable("down"), None, AgentAPIError(400, "refused"), None]
    posted: list[list[ListeningPort]] = []
    done = asyncio.Event()

    async def post(listed: list[ListeningPort]) -> None:
        posted.append(listed)
        outcome = outcomes.pop(0)
        if not outcomes:
            done.set()
        if outcome is not None:
            raise outcome

    async def scenario() -> None:
        task = asyncio.create_task(PortReporter(post, scan=lambda: next(scans, A)).run())
        await done.wait()
        task.cancel()

    run(scenario(), timeout=60)
    # A (server down: sent again), A (taken), B (refused: kept as sent, not repeated while the same), A again.
    assert posted == [A, A, B, A]
