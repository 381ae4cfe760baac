"""Script timings go to the server in order; a server from before timings (404) is asked once, then left alone."""

from __future__ import annotations

import asyncio

from agent.api import AgentAPI
from agent.script_timings import ScriptTimingReporter
from protocol.timings import ScriptTiming
from tests.agent.support import run


def timing(source: str) -> ScriptTiming:
    return ScriptTiming(log_source_id=source, started_at="2026-11-27T10:00:00Z", ended_at="2026-11-27T10:00:01Z")


async def against(status: int, *sources: str) -> tuple[list[bytes], bool]:
    """Report ``sources`` to a real HTTP server answering every call with ``status``: the request lines and bodies it
    got, and whether the reporter said it was done."""
    seen: list[bytes] = []

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        length = next(int(line.split(b":")[1]) for line in lines if line.lower().startswith(b"content-length"))
        seen.append(lines[0] + b" " + await reader.readexactly(length))
        body = b'{"message": "Not found."}' if status == 404 else b""
        reply = f"HTTP/1.1 {status} X\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body
        writer.write(reply)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    api = AgentAPI(f"http://127.0.0.1:{port}", "token")
    reporter = ScriptTimingReporter(api)
    sender = asyncio.create_task(reporter.run())
    try:
        for source in sources:
            reporter.report(timing(source))
        done = await reporter.flush(30)
        reporter.report(timing("after"))
        done = done and await reporter.flush(30)
    finally:
        sender.cancel()
        await asyncio.gather(sender, return_exceptions=True)
        await api.aclose()
        server.close()
        await server.wait_closed()
    return seen, done


def test_timings_are_posted_in_order() -> None:
    seen, done = run(against(204, "a", "b"))

    assert done
    assert [line.split(b" ")[1] for line in seen] == [b"/api/v2/workspaceagents/me/script-timings"] * 3
    assert [b'"log_source_id":"a"' in seen[0], b'"log_source_id":"b"' in seen[1]] == [True, True]
    assert b'"log_source_id":"after"' in seen[2]


def test_an_older_server_is_asked_once_then_left_alone() -> None:
    seen, done = run(against(404, "a", "b"))

    assert done  # nothing is left waiting: a start never hangs on timings
    assert len(seen) == 1 and b'"log_source_id":"a"' in seen[0]
