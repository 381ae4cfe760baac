"""`slipway logs -f` (and every command that follows a build) rides out a server restart or a database blip: the
server answers 503 or drops the connection for a while, and the CLI resumes after the last line it printed.

The server here is a scripted stand-in at the HTTP level (what tests/test_database_outage.py shows the real one
answers while its database is away), so that the CLI's waiting is checked without a database to break."""

from __future__ import annotations

import json
from collections.abc import Iterator

import click
import httpx
import pytest

from cli import follow
from cli.client import SlipwayClient
from cli.follow import follow_job, print_log_line
from protocol.logs import JobLog

DOWN = {"message": "The database is not answering (it may be restarting); try again in a moment."}


def _sse(*events: tuple[str, dict[str, object]]) -> bytes:
    return b"".join(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode() for name, data in events)


def _line(number: int, output: str) -> tuple[str, dict[str, object]]:
    body = {"id": number, "created_at": "2026-11-26T18:00:00Z", "source": "provisioner", "level": "info",
            "stage": "Planning", "output": output}  # fmt: skip
    return ("log", body)


class ScriptedServer:
    def __init__(self, answers: list[httpx.Response | Exception]) -> None:
        self.answers: Iterator[httpx.Response | Exception] = iter(answers)
        self.asked: list[str] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.asked.append(str(request.url.params.get("after")))
        answer = next(self.answers)
        if isinstance(answer, Exception):
            raise answer
        return answer


@pytest.fixture(autouse=True)
def no_waiting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(follow, "RECONNECT_DELAYS", (0.0,))


def test_a_stream_lost_to_a_database_blip_resumes_after_the_last_line(capsys: pytest.CaptureFixture[str]) -> None:
    server = ScriptedServer([
        httpx.Response(200, content=_sse(_line(1, "first"), _line(2, "second")) + b"event: log\ndata: {trunc"),
        httpx.Response(503, json=DOWN),
        httpx.ConnectError("connection refused"),
        httpx.Response(503, json=DOWN),
        httpx.Response(200, content=_sse(_line(3, "third"), ("end", {"status": "succeeded"}))),
    ])  # fmt: skip
    client = SlipwayClient("http://slipway.test", "token", transport=httpx.MockTransport(server))
    end = follow_job(client, "/api/v2/workspacebuilds/b/logs")
    assert end.status == "succeeded"
    out, err = capsys.readouterr()
    assert [line.strip() for line in out.splitlines()] == ["==> Planning", "first", "second", "third"]
    assert "reconnecting" in err and "database is not answering" in err and "(reconnected)" in err
    assert server.asked == ["0", "2", "2", "2", "2"]  # always after the last line printed


def test_it_gives_up_in_the_end_and_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(follow, "GIVE_UP_AFTER_SECONDS", 0.0)
    server = ScriptedServer([httpx.Response(503, json=DOWN)] * 3)
    client = SlipwayClient("http://slipway.test", "token", transport=httpx.MockTransport(server))
    with pytest.raises(click.ClickException, match="lost the log stream from http://slipway.test: The database"):
        follow_job(client, "/api/v2/workspacebuilds/b/logs")


def test_an_answer_that_will_not_pass_is_not_waited_on() -> None:
    server = ScriptedServer([httpx.Response(404, json={"message": "No such workspace build."})])
    client = SlipwayClient("http://slipway.test", "token", transport=httpx.MockTransport(server))
    with pytest.raises(click.ClickException, match="No such workspace build"):
        follow_job(client, "/api/v2/workspacebuilds/b/logs")
    assert len(server.asked) == 1


def test_terraforms_blank_lines_print_and_the_daemons_stage_marks_do_not(capsys: pytest.CaptureFixture[str]) -> None:
    lines = [
        JobLog.from_json({**_line(1, "")[1], "source": "provisioner_daemon", "stage": "Setting up"}),
        JobLog.from_json({**_line(2, "Error: Invalid expression")[1], "stage": "Setting up"}),
        JobLog.from_json({**_line(3, "")[1], "stage": "Setting up"}),
        JobLog.from_json({**_line(4, "  on main.tf line 2")[1], "stage": "Setting up"}),
    ]
    stage = None
    for line in lines:
        stage = print_log_line(line, stage)
    out, _ = capsys.readouterr()
    assert out.splitlines() == ["==> Setting up", "    Error: Invalid expression", "", "      on main.tf line 2"]
