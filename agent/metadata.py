"""Agent metadata (README "Metadata", reference §1.6): each item's script runs every ``interval`` seconds and
the newest result of every key goes to ``POST /metadata`` about once a second."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path

from agent.api import AgentAPIError, ServerUnavailable, utc_now
from agent.processes import PipedProcess, exit_code, kill_and_reap, posix_shell_command, spawn_piped
from protocol.agentapi import MetadataReport, MetadataResult
from protocol.resources import AgentMetadata

log = logging.getLogger(__name__)

FLUSH_INTERVAL = 1.0
# The server keeps 2,048 bytes of a value; reading much more than that is wasted memory.
OUTPUT_KEEP_BYTES = 64 * 1024

PostMetadata = Callable[[MetadataReport], Awaitable[None]]


async def _read_capped(stream: asyncio.StreamReader) -> bytes:
    kept = b""
    while chunk := await stream.read(OUTPUT_KEEP_BYTES):
        if len(kept) < OUTPUT_KEEP_BYTES:
            kept += chunk[: OUTPUT_KEEP_BYTES - len(kept)]
    return kept


async def _finish(piped: PipedProcess) -> tuple[bytes, bytes, int]:
    stdout, stderr, returncode = await asyncio.gather(
        _read_capped(piped.stdout), _read_capped(piped.stderr), piped.process.wait()
    )
    return stdout, stderr, returncode


async def collect(script: str, timeout: float, *, cwd: Path, env: Mapping[str, str]) -> tuple[str, str]:
    """Run one metadata script: (value, error), the value being stdout without surrounding whitespace."""
    try:
        piped = await spawn_piped(posix_shell_command(script), cwd=cwd, env=env)
    except OSError as exc:
        return "", f"the script could not be started: {exc}"
    try:
        stdout, stderr, returncode = await asyncio.wait_for(_finish(piped), timeout)
    except TimeoutError:
        await kill_and_reap(piped)
        return "", f"the script timed out after {timeout:g} s"
    except BaseException:  # cancelled: leave no probe behind
        await asyncio.shield(kill_and_reap(piped))
        raise
    piped.close_pipes()
    value = stdout.decode("utf-8", errors="replace").strip()
    if returncode != 0:
        reason = stderr.decode("utf-8", errors="replace").strip()
        return value, reason or f"the script exited with status {exit_code(returncode)}"
    return value, ""


class MetadataCollector:
    def __init__(
        self,
        descriptions: Sequence[AgentMetadata],
        post: PostMetadata,
        *,
        directory: Path,
        environment: Callable[[], Mapping[str, str]],
        flush_interval: float = FLUSH_INTERVAL,
    ) -> None:
        self._descriptions = list(descriptions)
        self._post = post
        self._directory = directory
        self._environment = environment
        self._flush_interval = flush_interval
        self._pending: dict[str, MetadataResult] = {}

    async def _collect_forever(self, description: AgentMetadata) -> None:
        interval = max(description.interval, 1)
        timeout = description.timeout if description.timeout > 0 else interval
        while True:
            started = time.monotonic()
            value, error = await collect(description.script, timeout, cwd=self._directory, env=self._environment())
            self._pending[description.key] = MetadataResult(
                key=description.key, value=value, error=error, collected_at=utc_now()
            )
            await asyncio.sleep(max(interval - (time.monotonic() - started), 0))

    async def _flush_forever(self) -> None:
        while True:
            await asyncio.sleep(self._flush_interval)
            if not self._pending:
                continue
            batch, self._pending = self._pending, {}
            try:
                await self._post(MetadataReport(metadata=tuple(batch.values())))
            except ServerUnavailable as exc:
                log.debug("metadata not sent (%s); it goes with the next batch", exc.problem)
                self._pending = {**batch, **self._pending}  # newer results of the same keys win
            except AgentAPIError as exc:
                log.warning("the server refused metadata %s: %s", sorted(batch), exc)

    async def run(self) -> None:
        """Collect and send until cancelled."""
        if not self._descriptions:
            return
        async with asyncio.TaskGroup() as group:
            group.create_task(self._flush_forever())
            for description in self._descriptions:
                group.create_task(self._collect_forever(description))
