"""Scripts run as real processes: parallelism, exit codes, timeouts, output levels, log files, environment,
the background-child rule and the process groups shutdown stops."""

from __future__ import annotations

import asyncio
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from agent import scripts
from agent.environment import build_environment
from agent.scripts import LineSplitter, ScriptResult, ScriptRunner, SendTiming
from protocol.agentapi import AgentLogLine as LogLine
from protocol.agentapi import Manifest
from protocol.resources import Script
from protocol.timings import STAGE_STOP, ScriptTiming
from tests.agent.support import pid_alive, run

MANIFEST = Manifest(
    workspace_name="ws1",
    owner_name="alice",
    agent_name="main",
    environment_variables={"GREETING": "hello from $CODER_WORKSPACE_NAME", "EDITOR_HOME": "${HOME}/editor"},
)


class Recorder:
    def __init__(self) -> None:
        self.lines: list[LogLine] = []

    def __call__(self, line: LogLine) -> None:
        self.lines.append(line)

    def outputs(self, level: str | None = None) -> list[str]:
        return [line.output for line in self.lines if level is None or line.level == level]


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def runner(tmp_path: Path, recorder: Recorder) -> ScriptRunner:
    return make_runner(tmp_path, recorder)


def make_runner(tmp_path: Path, recorder: Recorder, send_timing: SendTiming | None = None) -> ScriptRunner:
    log_dir, workdir = tmp_path / "logs", tmp_path / "project"
    log_dir.mkdir()
    workdir.mkdir()
    agent_environ = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "SLIPWAY_AGENT_TOKEN": "secret-token"}
    return ScriptRunner(
        log_dir=log_dir,
        directory=workdir,
        environment_for=lambda script: build_environment(
            MANIFEST, log_dir, log_source_id=script.log_source_id, agent_environ=agent_environ
        ),
        send_log=recorder,
        send_timing=send_timing,
    )


def script(body: str, log_source_id: str = "source-1", **fields: Any) -> Script:
    return Script(log_source_id=log_source_id, script=body, **fields)


def test_start_scripts_run_in_parallel(runner: ScriptRunner) -> None:
    async def scenario() -> list[ScriptResult]:
        return list(
            await asyncio.gather(
                runner.run(script("sleep 1; echo one", log_source_id="a")),
                runner.run(script("sleep 1; echo two", log_source_id="b")),
                runner.run(script("sleep 1; echo three", log_source_id="c")),
            )
        )

    started = time.monotonic()
    results = run(scenario())
    assert time.monotonic() - started < 2.5
    assert all(result.ok for result in results)


def test_exit_code_and_output_levels(runner: ScriptRunner, recorder: Recorder, tmp_path: Path) -> None:
    result = run(runner.run(script("echo to-stdout; echo to-stderr >&2; printf 'no newline'; exit 3")))
    assert result == ScriptResult(exit_code=3)
    assert not result.ok
    assert recorder.outputs("info") == ["to-stdout", "no newline"]
    assert recorder.outputs("error") == ["to-stderr"]
    assert {line.log_source_id for line in recorder.lines} == {"source-1"}
    log_file = (tmp_path / "logs" / "coder-script-source-1.log").read_text()
    assert "to-stdout\n" in log_file
    assert "to-stderr\n" in log_file


def test_log_path_is_expanded_and_relative_to_the_log_dir(runner: ScriptRunner, tmp_path: Path) -> None:
    run(runner.run(script("echo relative", log_path="scripts/$CODER_WORKSPACE_NAME.log")))
    run(runner.run(script("echo home", log_path="~/home.log")))
    assert (tmp_path / "logs" / "scripts" / "ws1.log").read_text() == "relative\n"
    assert (tmp_path / "home.log").read_text() == "home\n"


def test_environment_of_a_script(runner: ScriptRunner, recorder: Recorder, tmp_path: Path) -> None:
    result = run(runner.run(script("pwd; env | sort", log_source_id="env-source")))
    assert result.ok
    output = recorder.outputs("info")
    assert output[0] == str(tmp_path / "project")
    variables = dict(line.split("=", 1) for line in output[1:] if "=" in line)
    data_root = tmp_path / "logs" / "coder-script-data"
    assert variables["CODER"] == "true"
    assert variables["CODER_WORKSPACE_NAME"] == "ws1"
    assert variables["CODER_WORKSPACE_OWNER_NAME"] == "alice"
    assert variables["CODER_WORKSPACE_AGENT_NAME"] == "main"
    assert variables["CODER_SCRIPT_DATA_DIR"] == str(data_root / "env-source")
    assert variables["CODER_SCRIPT_BIN_DIR"] == str(data_root / "bin")
    assert variables["PATH"] == f"{data_root / 'bin'}:/usr/bin:/bin"
    assert variables["GREETING"] == "hello from ws1"
    assert variables["EDITOR_HOME"] == f"{tmp_path}/editor"
    assert "SLIPWAY_AGENT_TOKEN" not in variables
    assert not any("secret-token" in line for line in output)
    assert (data_root / "env-source").is_dir()


def test_timeout_interrupts_the_script(runner: ScriptRunner, recorder: Recorder) -> None:
    started = time.monotonic()
    result = run(runner.run(script("echo begun; sleep 30", timeout=1)))
    assert result.timed_out
    assert not result.ok
    assert time.monotonic() - started < 5
    assert "the script timed out after 1 s" in recorder.outputs("error")


def test_a_script_ignoring_the_interrupt_is_killed(
    runner: ScriptRunner, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(scripts, "INTERRUPT_GRACE", 1.0)
    pid_file = tmp_path / "pid"
    started = time.monotonic()
    result = run(runner.run(script(f"trap '' INT; echo $$ > {pid_file}; while :; do sleep 0.1; done", timeout=1)))
    assert result.timed_out
    assert result.exit_code == 128 + 9
    assert time.monotonic() - started < 6
    assert not pid_alive(int(pid_file.read_text()))


def test_a_background_child_holding_the_output_is_not_waited_for(
    runner: ScriptRunner, recorder: Recorder, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(scripts, "OUTPUT_CLOSE_WAIT", 1.0)
    pid_file = tmp_path / "pid"

    async def scenario() -> ScriptResult:
        result = await runner.run(script(f"sleep 300 & echo $! > {pid_file}; echo launched"), remember_group=True)
        await runner.stop_leftovers(grace=2)
        return result

    started = time.monotonic()
    result = run(scenario())
    assert result.ok  # the script itself succeeded; only a warning says what happened
    assert time.monotonic() - started < 5
    assert "launched" in recorder.outputs("info")
    (warning,) = recorder.outputs("warn")
    assert "background process still holds its output open" in warning
    assert not pid_alive(int(pid_file.read_text()))


def test_stop_leftovers_terminates_then_kills_the_process_groups(runner: ScriptRunner, tmp_path: Path) -> None:
    polite, stubborn = tmp_path / "polite", tmp_path / "stubborn"
    body = (
        f"sleep 300 > /dev/null 2>&1 & echo $! > {polite}; "
        f"sh -c 'trap \"\" TERM; echo $$ > {stubborn}; while :; do sleep 0.1; done' > /dev/null 2>&1 &"
    )

    async def scenario() -> tuple[int, int]:
        result = await runner.run(script(body), remember_group=True)
        assert result.ok
        while not stubborn.exists() or not stubborn.read_text().strip():
            await asyncio.sleep(0.05)
        pids = int(polite.read_text()), int(stubborn.read_text())
        assert all(pid_alive(pid) for pid in pids)
        await runner.stop_leftovers(grace=1)
        return pids

    for pid in run(scenario()):
        assert not pid_alive(pid)


def test_a_script_that_cannot_start_is_a_failure(tmp_path: Path, recorder: Recorder) -> None:
    runner = ScriptRunner(
        log_dir=tmp_path,
        directory=tmp_path / "missing",
        environment_for=lambda _: {"PATH": "/usr/bin:/bin"},
        send_log=recorder,
    )
    result = run(runner.run(script("echo never")))
    assert result.exit_code is None
    assert not result.ok
    assert "could not start" in recorder.outputs("error")[0]


def test_line_splitter_handles_crlf_partial_and_endless_lines() -> None:
    splitter = LineSplitter(max_bytes=10)
    assert splitter.feed(b"one\r\ntw") == ["one"]
    assert splitter.feed(b"o\nthree") == ["two"]
    assert splitter.feed(b"x" * 25) == ["threexxxxx", "xxxxxxxxxx"]
    assert splitter.finish() == ["xxxxxxxxxx"]
    assert LineSplitter().feed("é\n".encode()[:1] + b"\n") == ["\ufffd"]


def test_each_run_reports_its_timing_with_how_it_ended(tmp_path: Path, recorder: Recorder) -> None:
    sent: list[ScriptTiming] = []
    runner = make_runner(tmp_path, recorder, sent.append)  # the agent wires its ScriptTimingReporter here

    run(runner.run(script("sleep 0.2", log_source_id="ok")))
    run(runner.run(script("exit 4", log_source_id="fails"), stage=STAGE_STOP))
    run(runner.run(script("sleep 30", log_source_id="slow", timeout=1)))

    assert [(t.log_source_id, t.stage, t.status) for t in sent] == [
        ("ok", "start", "ok"), ("fails", "stop", "exit_failure"), ("slow", "start", "timed_out"),
    ]  # fmt: skip
    assert (sent[0].exit_code, sent[1].exit_code) == (0, 4)
    took = datetime.fromisoformat(sent[0].ended_at) - datetime.fromisoformat(sent[0].started_at)
    assert took.total_seconds() >= 0.2
