"""Why a job failed, read from what is already stored: its error and its log's error lines.

Nothing new travels from the daemon: Terraform's diagnostics reach the log as Terraform prints them
(workers/terraform/logs.py), so the first ``Error:`` line is where the cause begins, and its ``with <address>,``
line (or an ``<address>: Creation errored after …`` line) names the resource.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from itertools import accumulate

from sqlalchemy import Select, func, literal_column, select

from app.core.extensions import db
from app.provisioning.models import FAILED, ProvisionerJob, ProvisionerJobLog
from protocol.logs import FailureCause

# Enough to pass Terraform's warnings and the daemon's lines before the first error; a log whose first error lies
# further in still gets a cause, only without a line to link to.
ERROR_LINES_READ = 200
# And the last lines: a command that printed more than that before failing (its whole output is the detail of one
# diagnostic) says why at its end.
ERROR_LINES_TAIL = 50
ERROR_LEVEL = "error"

# Terraform's "  with null_resource.setup," (an apply or plan error about one resource) and its hook message
# "null_resource.setup: Creation errored after 1s".
_WITH_RESOURCE = re.compile(r"^\s*with ([A-Za-z0-9_.\[\]\"-]+),\s*$")
_ERRORED = re.compile(r"^([A-Za-z0-9_.\[\]\"-]+): \w+ errored after\b")
# `terraform init`'s preamble before the configuration's own errors (workers/terraform/logs.py skips it too): the
# cause is the error after it.
_GENERIC_INIT_ERROR = "Error: Terraform encountered problems during initiali"
# Headings that only wrap the real cause below them: the detail replaces them as the message.
_WRAPPERS = frozenset(
    {"local-exec provisioner error", "remote-exec provisioner error", "file provisioner error", "Error running command"}
)
# A diagnostic's location lines as workers/terraform/logs.py renders them: "  with <address>,", "  on main.tf line
# 5, in resource ...:" and the code under it ("    5:   provisioner ...").
_LOCATION = re.compile(r"^\s*(with \S+,|on \S+ line \d+.*:|\d+: .*|\d+:)\s*$")
# Terraform's local-exec detail: "Error running command '<command>': exit status 128. Output: <its output>" (the
# command may span lines; older releases wrote "exit status 128: <output>").
_COMMAND_FAILED = re.compile(
    r"Error running command '(?P<command>.*?)': "
    r"(?P<status>exit status \d+|signal: \w+|[^.:\n]+)(\. Output:|:)(?P<output>)",
    re.DOTALL,
)
# An output line that says what went wrong, as commands word it ("fatal: ...", "error: ...", "... not found").
_READS_AS_ERROR = re.compile(
    r"^(fatal|error|err|panic|e)\b\s*[:!]|\b(error|failed|unable|denied|not found|no such|cannot|can't|refused)\b",
    re.IGNORECASE,
)


def failure_cause(job: ProvisionerJob) -> FailureCause | None:
    """The cause of ``job``'s failure, or None when it did not fail."""
    if job.status != FAILED:
        return None
    return failure_causes([job])[job.id]


def failure_causes(jobs: Sequence[ProvisionerJob]) -> dict[str, FailureCause | None]:
    """Each job's cause by id (None for those that did not fail): one query for a whole list, each failed job's
    first error lines."""
    failed = [job for job in jobs if job.status == FAILED]
    lines: dict[str, list[tuple[int, str]]] = {job.id: [] for job in failed}
    if failed:
        for job_id, line_id, output in db.session.execute(error_lines_query(list(lines))):
            lines[job_id].append((line_id, output))
    return {job.id: cause_from_lines(job.error or "", lines[job.id]) if job.id in lines else None for job in jobs}


def error_lines_query(job_ids: list[str]) -> Select[str, int, str]:
    """Each job's first ``ERROR_LINES_READ`` and last ``ERROR_LINES_TAIL`` error lines (job id, line id, text), in
    order."""
    log = ProvisionerJobLog
    place = func.row_number().over(partition_by=log.job_id, order_by=log.id).label("place")
    from_end = func.row_number().over(partition_by=log.job_id, order_by=log.id.desc()).label("from_end")
    errors = (
        select(log.job_id, log.id, log.output, place, from_end)
        # The level as a literal in the SQL, not a parameter: the partial index of error lines is chosen by it.
        .where(log.job_id.in_(job_ids), log.level == literal_column(f"'{ERROR_LEVEL}'"))
        .subquery()
    )
    return (
        select(errors.c.job_id, errors.c.id, errors.c.output)
        .where((errors.c.place <= ERROR_LINES_READ) | (errors.c.from_end <= ERROR_LINES_TAIL))
        .order_by(errors.c.job_id, errors.c.id)
    )


def cause_from_lines(error: str, error_lines: Sequence[tuple[int, str]]) -> FailureCause:
    """The cause, from the job's error and its error-level log lines (id, text) in order.

    The first line of the real cause is what a person needs: Terraform's diagnostic detail under its heading, and
    for a provisioner the command's own output, not the wrappers around it ("local-exec provisioner error",
    "Error running command ... Output:"). The link goes to the log line that holds it."""
    texts = [(line_id, text) for line_id, text in error_lines if text.strip()]
    place = next((index for index, (_, text) in enumerate(texts) if _is_cause_heading(text)), None)
    first = texts[place] if place is not None else (texts[0] if texts else None)
    error_first = _first_line(error)
    summary = _first_line(first[1].strip().removeprefix("Error: ")) if first else ""
    # The log's words are the cause only when the job's error came from the same diagnostics (the daemon joins their
    # headings); an error of the daemon's own (it stopped responding, a timeout) is the cause as it stands.
    real = _real_cause(texts[place + 1 :]) if place is not None else None
    if real is not None and (not error_first or error_first.startswith(summary)):
        line_id, quoted = real
        wrapper = summary in _WRAPPERS
        message = quoted if wrapper else f"{summary}: {quoted}"
        if error_first != summary and not wrapper:  # several errors: the others' headings follow
            message = f"{message} (also: {error_first.removeprefix(summary).lstrip('; ')})"
        return FailureCause(
            message=message,
            resource=_resource([text for _, text in texts]),
            log_line_id=line_id,
            summary=summary,
        )
    message = error_first or summary
    return FailureCause(
        message=message or "The job failed without saying why.",
        resource=_resource([text for _, text in texts]),
        log_line_id=first[0] if first else None,
    )


def _is_cause_heading(text: str) -> bool:
    stripped = text.lstrip()
    return stripped.startswith("Error: ") and not stripped.startswith(_GENERIC_INIT_ERROR)


def _real_cause(after: Sequence[tuple[int, str]]) -> tuple[int, str] | None:
    """The first line of the real cause among a heading's detail lines (the non-blank lines after it, up to the next
    heading; its location and code lines skipped), with its line id; None when the diagnostic has no detail."""
    detail: list[tuple[int, str]] = []
    for line_id, text in after:
        if text.lstrip().startswith(("Error: ", "Warning: ")):
            break
        if not _LOCATION.match(text):
            detail.append((line_id, text))
    if not detail:
        return None
    joined = "\n".join(text for _, text in detail)
    command = _COMMAND_FAILED.search(joined)
    if command is None:
        return detail[0][0], detail[0][1].strip()
    # A provisioner's command failed: its own output says why (git's "fatal: unable to access ..."), the
    # first line that reads as an error, else its last line; with no output, the exit status is all there is.
    output_starts = command.start("output")
    offsets = [0, *accumulate(len(text) + 1 for _, text in detail[:-1])]  # where each line begins in ``joined``
    output: list[tuple[int, str]] = []
    for (line_id, text), offset in zip(detail, offsets, strict=True):
        end = offset + len(text)
        if end < output_starts:
            continue
        piece = text[max(0, output_starts - offset) :].strip()
        if piece:
            output.append((line_id, piece))
    if not output:
        # The line the status is on (a command of several lines puts it below the first).
        line_id = [line_id for (line_id, _), offset in zip(detail, offsets, strict=True)
                   if offset <= command.start("status")][-1]  # fmt: skip
        return line_id, f"The command {command.group('command')!r} failed: {command.group('status')}."
    return next(((line_id, text) for line_id, text in output if _READS_AS_ERROR.search(text)), output[-1])


def _resource(texts: Sequence[str]) -> str:
    for pattern in (_WITH_RESOURCE, _ERRORED):
        for text in texts:
            if match := pattern.match(text):
                return match.group(1)
    return ""


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")
