"""Ships a job's log lines to the server in batches; each post doubles as the job's heartbeat."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from protocol.logs import LogLine
from protocol.provisionerd import MAX_BATCH_LINES, LogBatch
from workers.client import ProvisionerClient

log = logging.getLogger(__name__)

FLUSH_INTERVAL = 0.25
FLUSH_LINES = 100
# With nothing to say, still report this often: it keeps the job alive and brings news of a cancel.
HEARTBEAT_INTERVAL = 1.0


class LogShipper:
    def __init__(self, client: ProvisionerClient, job_id: str, on_cancel: Callable[[], None]):
        self.client = client
        self.job_id = job_id
        self.on_cancel = on_cancel
        self.canceled = False
        self._lines: list[LogLine] = []
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"logship-{job_id[:8]}", daemon=True)

    def __enter__(self) -> LogShipper:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout=60)
        self._flush()  # whatever arrived after the thread's last pass

    def add(self, line: LogLine) -> None:
        with self._lock:
            self._lines.append(line)
            full = len(self._lines) >= FLUSH_LINES
        if full:
            self._wake.set()

    def _run(self) -> None:
        idle = 0.0
        while not self._stop.is_set():
            self._wake.wait(FLUSH_INTERVAL)
            self._wake.clear()
            with self._lock:
                pending = bool(self._lines)
            idle += FLUSH_INTERVAL
            if pending or idle >= HEARTBEAT_INTERVAL:
                self._flush()
                idle = 0.0

    def _flush(self) -> None:
        with self._lock:
            batch, self._lines = self._lines, []
        try:
            for start in range(0, max(len(batch), 1), MAX_BATCH_LINES):
                chunk = LogBatch(logs=tuple(batch[start : start + MAX_BATCH_LINES]))
                canceled = self.client.post_logs(self.job_id, chunk)
                if canceled and not self.canceled:
                    self.canceled = True
                    self.on_cancel()
        except Exception:  # the job's own completion call will report the real failure
            log.warning("could not ship logs of job %s", self.job_id, exc_info=True)
