"""The loop that runs cron scripts (the schedules themselves: protocol/cron.py, shared with the provider)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import datetime

from protocol.cron import CronSchedule, IntervalSchedule


async def run_on_schedule(
    schedule: CronSchedule | IntervalSchedule,
    job: Callable[[], Awaitable[object]],
    *,
    now: Callable[[], datetime] = datetime.now,
) -> None:
    """Run ``job`` at each matching time until cancelled. A run still going at the next time makes that time
    pass unrun rather than overlap it."""
    last_run: datetime | None = None
    while True:
        current = now()
        # The clock may read a hair before the second just run (sleep and wall clock differ): never run it twice.
        target = schedule.next_after(max(current, last_run) if last_run else current)
        await asyncio.sleep(max((target - current).total_seconds(), 0))
        last_run = target
        await job()
