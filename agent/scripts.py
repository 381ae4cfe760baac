"""Running the template's scripts (README "What the agent does", reference §1.5).

Each script runs with ``sh -c`` in the expanded directory, in its own process group. stdout lines go to the
script's log source at ``info`` and stderr lines at ``error``, and both to its log file. Over its timeout a script
gets SIGINT, then SIGKILL 10 s later. A script that exits while a background child keeps its output open is
waited for at most 10 s more. The process groups of start and cron scripts are remembered so that shutdown can
stop whatever they left running.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from agent.api import utc_now
from agent.environment import expand_path, script_bin_dir, script_data_root
from agent.logs import log_line
from agent.processes import (
    PipedProcess,
    ProcessGroups,
    exit_code,
    posix_shell_command,
    signal_group,
    spawn_piped,
)
from protocol.agentapi import AgentLogLine
from protocol.resources import Script
from protocol.timings import STAGE_START, ScriptTiming

log = logging.getLogger(__name__)

INTERRUPT_GRACE = 10.0  # SIGINT, then SIGKILL this much later
OUTPUT_CLOSE_WAIT = 10.0  # after the script exits, how long a background child may keep its output open
LINE_MAX_BYTES = 64 * 1024

SendLog = Callable[[AgentLogLine], None]
EnvironmentFor = Callable[[Script], Mapping[str, str]]
SendTiming = Callable[[ScriptTiming], None]


@dataclass(frozen=True)
class ScriptResult:
    exit_code: int | None  # None when the script could not be started
    timed_out: bool = False
    error: str = ""

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out

    @property
    def status(self) -> str:
        """Coder's word for how it ended."""
        return "timed_out" if self.timed_out else "ok" if self.exit_code == 0 else "exit_failure"


class LineSplitter:
    """Bytes in, whole lines out: CR LF and lone LF end a line, a trailing CR is dropped, a partial line waits."""

    def __init__(self, max_bytes: int = LINE_MAX_BYTES) -> None:
        self._pending = b""
        self._max_bytes = max_bytes

    def feed(self, data: bytes) -> list[str]:
        self._pending += data
        *complete, self._pending = self._pending.split(b"\n")
        lines = [self._decode(line) for line in complete]
        while len(self._pending) > self._max_bytes:  # a line that never ends must not grow without bound
            lines.append(self._decode(self._pending[: self._max_bytes]))
            self._pending = self._pending[self._max_bytes :]
        return lines

    def finish(self) -> list[str]:
        rest, self._pending = self._pending, b""
        return [self._decode(rest)] if rest else []

    @staticmethod
    def _decode(line: bytes) -> str:
        return line.removesuffix(b"\r").decode("utf-8", errors="replace")


class ScriptRunner:
    def __init__(
        self,
        *,
        log_dir: Path,
        directory: Path,
        environment_for: EnvironmentFor,
        send_log: SendLog,
        leftovers: ProcessGroups | None = None,
        send_timing: SendTiming | None = None,
    ) -> None:
        self._log_dir = log_dir
        self.directory = directory
        self._environment_for = environment_for
        self._send_log = send_log
        self._send_timing = send_timing
        self.leftovers = leftovers or ProcessGroups()

    def log_path(self, script: Script, environ: Mapping[str, str]) -> Path:
        if not script.log_path.strip():
            return self._log_dir / f"coder-script-{script.log_source_id}.log"
        path = Path(expand_path(script.log_path, environ))
        return path if path.is_absolute() else self._log_dir / path

    def _emit(self, script: Script, log_file: TextIO | None, level: str, text: str) -> None:
        self._send_log(log_line(text, level, script.log_source_id))
        if log_file is not None:
            with contextlib.suppress(OSError):
                log_file.write(text + "\n")
                log_file.flush()

    def _open_log_file(self, script: Script, environ: Mapping[str, str]) -> TextIO | None:
        path = self.log_path(script, environ)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            return path.open("a", encoding="utf-8")
        except OSError as exc:
            log.warning("script %r: cannot open its log file %s: %s", script.name, path, exc)
            return None

    async def _pump(self, script: Script, log_file: TextIO | None, stream: asyncio.StreamReader, level: str) -> None:
        splitter = LineSplitter()
        while chunk := await stream.read(LINE_MAX_BYTES):
            for line in splitter.feed(chunk):
                self._emit(script, log_file, level, line)
        for line in splitter.finish():
            self._emit(script, log_file, level, line)

    async def run(self, script: Script, *, remember_group: bool = False, stage: str = STAGE_START) -> ScriptResult:
        """Run one script to its end; ``remember_group`` marks it as one whose leftovers shutdown stops. Its timing
        (``stage``: start, stop or cron) goes to ``send_timing`` when it ends."""
        started_at = utc_now()
        result = await self._run(script, remember_group)
        if self._send_timing is not None:
            self._send_timing(
                ScriptTiming(
                    log_source_id=script.log_source_id, stage=stage, started_at=started_at, ended_at=utc_now(),
                    exit_code=result.exit_code if result.exit_code is not None else -1, status=result.status,
                )
            )  # fmt: skip
        return result

    async def _run(self, script: Script, remember_group: bool) -> ScriptResult:
        environ = dict(self._environment_for(script))
        for directory in (script_data_root(self._log_dir) / script.log_source_id, script_bin_dir(self._log_dir)):
            with contextlib.suppress(OSError):
                directory.mkdir(parents=True, exist_ok=True)
        log_file = self._open_log_file(script, environ)
        try:
            return await self._run_with_log(script, environ, log_file, remember_group)
        finally:
            if log_file is not None:
                log_file.close()

    async def _run_with_log(
        self, script: Script, environ: Mapping[str, str], log_file: TextIO | None, remember_group: bool
    ) -> ScriptResult:
        try:
            piped = await spawn_piped(posix_shell_command(script.script), cwd=self.directory, env=environ)
        except OSError as exc:
            message = f"the agent could not start this script: {exc}"
            self._emit(script, log_file, "error", message)
            return ScriptResult(exit_code=None, error=message)
        if remember_group:
            self.leftovers.add(piped.pgid)
        log.info("script %r started (pid %d)", script.name, piped.process.pid)
        pumps = [
            asyncio.create_task(self._pump(script, log_file, piped.stdout, "info")),
            asyncio.create_task(self._pump(script, log_file, piped.stderr, "error")),
        ]
        try:
            returncode, timed_out = await self._wait(script, piped)
            await self._wait_for_output(script, log_file, piped, pumps)
        finally:
            for pump in pumps:
                pump.cancel()
            await asyncio.gather(*pumps, return_exceptions=True)
            piped.close_pipes()
        code = exit_code(returncode)
        if timed_out:
            self._emit(script, log_file, "error", f"the script timed out after {script.timeout} s")
        log.info("script %r ended with exit code %d%s", script.name, code, " (timed out)" if timed_out else "")
        return ScriptResult(exit_code=code, timed_out=timed_out)

    async def _wait(self, script: Script, piped: PipedProcess) -> tuple[int, bool]:
        timeout = script.timeout or None
        try:
            return await asyncio.wait_for(asyncio.shield(piped.process.wait()), timeout), False
        except TimeoutError:
            pass
        signal_group(piped.pgid, signal.SIGINT)
        try:
            return await asyncio.wait_for(asyncio.shield(piped.process.wait()), INTERRUPT_GRACE), True
        except TimeoutError:
            signal_group(piped.pgid, signal.SIGKILL)
            return await piped.process.wait(), True

    async def _wait_for_output(
        self, script: Script, log_file: TextIO | None, piped: PipedProcess, pumps: list[asyncio.Task[None]]
    ) -> None:
        _, pending = await asyncio.wait(pumps, timeout=OUTPUT_CLOSE_WAIT)
        if pending:
            self._emit(
                script,
                log_file,
                "warn",
                f"the script exited, but a background process still holds its output open after "
                f"{OUTPUT_CLOSE_WAIT:g} s; the agent stops reading it. Redirect that process's output "
                "(e.g. > /tmp/app.log 2>&1 &) or give it a script of its own.",
            )
            log.warning("script %r exited but left its output open", script.name)

    async def stop_leftovers(self, grace: float = 5.0) -> None:
        """SIGTERM the remembered process groups, SIGKILL what is left ``grace`` seconds later."""
        await self.leftovers.stop(grace)
