"""Outcomes the server has not acknowledged yet, kept on the daemon's disk.

A build's outcome carries its Terraform state: losing it means the next build starts from an old state and creates
everything again. So the outcome (and the log lines not yet shipped) is written here before it is sent, and
removed only once the server has answered it. A daemon that cannot reach the server keeps trying; one that stops
meanwhile delivers what it kept when it starts again. The server takes a result once (the log lines are numbered,
and a result that arrives after the job was ended is recorded as late, not run again).
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from protocol.codec import JSON
from protocol.logs import LogLine
from protocol.provisionerd import JobCompletion, JobFailure

log = logging.getLogger(__name__)

COMPLETE, FAIL = "complete", "fail"


@dataclass(frozen=True)
class Undelivered:
    job_id: str
    outcome: JobCompletion | JobFailure
    # The numbered log lines the shipper still held: the number of the first, and the lines.
    first_seq: int = 0
    lines: tuple[LogLine, ...] = ()

    def to_json(self) -> JSON:
        kind = FAIL if isinstance(self.outcome, JobFailure) else COMPLETE
        return {
            "job_id": self.job_id, "kind": kind, "outcome": self.outcome.to_json(),
            "first_seq": self.first_seq, "lines": [line.to_json() for line in self.lines],
        }  # fmt: skip

    @classmethod
    def from_json(cls, data: dict[str, JSON]) -> Undelivered:
        kind, outcome = data["kind"], data["outcome"]
        parsed = JobFailure.from_json(outcome) if kind == FAIL else JobCompletion.from_json(outcome)
        lines = data.get("lines") or []
        assert isinstance(lines, list)  # noqa: S101 - written by to_json above
        first_seq = data.get("first_seq") or 0
        return cls(
            job_id=str(data["job_id"]), outcome=parsed, first_seq=int(first_seq) if isinstance(first_seq, int) else 0,
            lines=tuple(LogLine.from_json(line) for line in lines),
        )  # fmt: skip


class Outbox:
    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def keep(self, entry: Undelivered) -> None:
        """Write the entry (private: a state holds secrets), replacing any earlier one of the job, atomically."""
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        handle, temporary = tempfile.mkstemp(dir=self.directory, prefix=".tmp-")
        try:
            with os.fdopen(handle, "w") as file:
                json.dump(entry.to_json(), file)
                file.flush()
                os.fsync(file.fileno())
            os.replace(temporary, self._path(entry.job_id))
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise

    def forget(self, job_id: str) -> None:
        self._path(job_id).unlink(missing_ok=True)

    def pending(self) -> Iterator[Undelivered]:
        """What earlier runs kept, oldest first; an entry that cannot be read is set aside (renamed), not lost."""
        if not self.directory.is_dir():
            return
        paths = sorted(self.directory.glob("*.json"), key=lambda path: path.stat().st_mtime)
        for path in paths:
            try:
                yield Undelivered.from_json(json.loads(path.read_text()))
            except (OSError, ValueError, KeyError, TypeError, AssertionError) as exc:
                log.error("outbox entry %s cannot be read (%s); kept aside as %s.unreadable", path, exc, path.name)
                path.rename(path.with_name(path.name + ".unreadable"))

    def _path(self, job_id: str) -> Path:
        if not job_id or "/" in job_id or job_id.startswith("."):
            raise ValueError(f"not a job id: {job_id!r}")
        return self.directory / f"{job_id}.json"
