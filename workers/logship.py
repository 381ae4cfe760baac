"""Ships a job's log lines to the server in batches; each post doubles as the job's heartbeat, and tells the daemon
whether the job is still its own."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from protocol.logs import LogLine
from protocol.provisionerd import MAX_BATCH_LINES, LogBatch, LogBatchReply
from workers.client import ProvisionerClient, ServerRefused

log = logging.getLogger(__name__)

FLUSH_INTERVAL = 0.25
FLUSH_LINES = 100
# With nothing to say, still report this often: it keeps the job alive and brings news of a cancel.
HEARTBEAT_INTERVAL = 1.0
# How long one post keeps trying: not long, since a batch that fails is kept and sent again with the next, and a
# shipper stuck in one long call could neither finish its job's log nor notice a lost lease.
SHIP_RETRY_SECONDS = 5.0
# Lines held while the server cannot be reached (each at most ~1 KiB once the server truncates it).
MAX_HELD_LINES = 20_000
# Out of touch for this share of the job's lease, the daemon stops the job's Terraform itself: by the end of the
# lease the server fails the job and may hand the workspace to another daemon.
LEASE_SHARE_BEFORE_STOPPING = 0.8
# What the server answers about a job that is no longer this daemon's: another holds it, or it ended (reaped).
JOB_NOT_OURS = (403, 404, 409)


class LogShipper:
    """Numbers the job's lines and ships them in order. A batch the server did not take is kept and sent again
    with the same numbers (the server stores each number once); once the server says the log is full, lines are
    only counted, and the numbers tell the server how many were dropped.

    The job is fenced, so that two Terraform runs never apply to one workspace at once: ``on_lost`` is called (once)
    with the reason and whether to stop at once. At once when the server says the job is no longer this daemon's
    (another may already run it); gracefully, so that Terraform saves its state, when the server has not answered
    for most of the job's lease (the server fails the job only when the lease is over)."""

    def __init__(
        self,
        client: ProvisionerClient,
        job_id: str,
        on_cancel: Callable[[], None],
        *,
        on_lost: Callable[[str, bool], None] = lambda reason, at_once: None,
        lease_seconds: float = 0.0,
        first_seq: int = 0,
    ):
        self.client = client
        self.job_id = job_id
        self.on_cancel = on_cancel
        self.on_lost = on_lost
        self.lease_seconds = lease_seconds
        self.canceled = False
        self.capped = False
        self.lost: str | None = None
        self._stopped_at_once = False
        self._last_answer = time.monotonic()
        self._lines: list[LogLine] = []
        self._first_seq = first_seq  # the number of self._lines[0] (while capped: of the next line)
        self._lock = threading.Lock()
        self._flushing = threading.Lock()  # one flush at a time: batches go in order
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"logship-{job_id[:8]}", daemon=True)
        # Apart from the shipping thread, which may be stuck in a call to a server that does not answer.
        self._watchdog = threading.Thread(target=self._watch_lease, name=f"lease-{job_id[:8]}", daemon=True)

    def __enter__(self) -> LogShipper:
        self._thread.start()
        if self.lease_seconds > 0:
            self._watchdog.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout=60)
        if self.lost is None:
            self._flush()  # whatever arrived after the thread's last pass
        if self._lines and self.lost is None:  # the runner sends them with the outcome (kept on disk until then)
            log.warning(
                "%d log lines of job %s are not delivered yet: they go with its outcome", len(self._lines), self.job_id
            )

    def unsent(self) -> tuple[int, tuple[LogLine, ...]]:
        """The number of the first line still held, and the held lines (none once the job is lost or capped)."""
        with self._lock:
            if self.lost is not None or self.capped:
                return self._first_seq, ()
            return self._first_seq, tuple(self._lines)

    def add(self, line: LogLine) -> None:
        with self._lock:
            if self.capped:
                self._first_seq += 1
                return
            self._lines.append(line)
            if len(self._lines) > MAX_HELD_LINES:  # the server has been away long: the oldest go (counted as dropped)
                del self._lines[0]
                self._first_seq += 1
            full = len(self._lines) >= FLUSH_LINES
        if full:
            self._wake.set()

    def _watch_lease(self) -> None:
        limit = self.lease_seconds * LEASE_SHARE_BEFORE_STOPPING
        while not self._stop.wait(min(1.0, limit / 10)):
            silent = time.monotonic() - self._last_answer
            if silent > self.lease_seconds:
                self._lose(f"the server has not answered for {silent:.0f} s, the job's whole lease", at_once=True)
                return
            if silent > limit:
                self._lose(
                    f"the server has not answered for {silent:.0f} s; it fails a job it does not hear about for "
                    f"{self.lease_seconds:.0f} s, and another daemon may then run it",
                    at_once=False,
                )

    def _lose(self, reason: str, *, at_once: bool) -> None:
        """Once; a graceful stop already under way is made immediate when the server says so, or the lease ends."""
        with self._lock:
            if self._stopped_at_once or (self.lost is not None and not at_once):
                return
            first = self.lost is None
            self.lost = self.lost or reason
            self._stopped_at_once = at_once
            self._lines = []
        if first:
            how = "now" if at_once else "(it saves its state first)"
            log.error("job %s is no longer this daemon's: %s; stopping its Terraform %s", self.job_id, reason, how)
        else:
            log.error("job %s: %s; stopping its Terraform now", self.job_id, reason)
        self.on_lost(reason, at_once)

    def _run(self) -> None:
        idle = 0.0
        while not self._stop.is_set() and self.lost is None:
            self._wake.wait(FLUSH_INTERVAL)
            self._wake.clear()
            with self._lock:
                pending = bool(self._lines)
            idle += FLUSH_INTERVAL
            if pending or idle >= HEARTBEAT_INTERVAL:
                self._flush()
                idle = 0.0

    def _flush(self) -> None:
        with self._flushing:
            with self._lock:
                batch, first = self._lines, self._first_seq
                self._lines = []
                self._first_seq += len(batch)
            sent = 0
            try:
                for start in range(0, max(len(batch), 1), MAX_BATCH_LINES):
                    chunk = tuple(batch[start : start + MAX_BATCH_LINES])
                    batch_to_send = LogBatch(logs=chunk, first_seq=first + start)
                    reply = self.client.post_logs(self.job_id, batch_to_send, retry_for=SHIP_RETRY_SECONDS)
                    self._last_answer = time.monotonic()
                    sent = start + len(chunk)
                    self._heed(reply)
                    if reply.stop_sending:  # the server would drop the rest: only their count goes
                        self._report_count(since=first + sent)
                        break
            except ServerRefused as exc:
                self._last_answer = time.monotonic()
                if exc.status in JOB_NOT_OURS:
                    self._lose(f"the server says: {exc.message}", at_once=True)
                else:  # the same batch would be refused again: it goes, the job goes on
                    log.error("the server refused log lines of job %s: %s", self.job_id, exc.message)
            except Exception as exc:  # kept for the next flush (the client already said what the trouble is)
                log.warning("could not ship logs of job %s (%s); keeping them to send again", self.job_id, exc)
                with self._lock:
                    if not self.capped:
                        self._lines = batch[sent:] + self._lines
                        self._first_seq = first + sent

    def _report_count(self, *, since: int) -> None:
        """Tell the server now how many lines were dropped past the cap: the next batch would, but there may be none
        (the job's last flush)."""
        with self._lock:
            upto = self._first_seq
        if upto > since:
            self.client.post_logs(self.job_id, LogBatch(logs=(), first_seq=upto), retry_for=SHIP_RETRY_SECONDS)

    def _heed(self, reply: LogBatchReply) -> None:
        if reply.stop_sending and not self.capped:
            log.warning("the log of job %s is full: further lines are counted, not sent", self.job_id)
            with self._lock:
                self.capped = True
                self._first_seq += len(self._lines)
                self._lines = []
        if reply.canceled and not self.canceled:
            self.canceled = True
            self.on_cancel()
