"""A provisioner job's log lines, as the daemon sends them and as the API and streams show them."""

from __future__ import annotations

from typing import Literal

from protocol.codec import Message

LogLevel = Literal["trace", "debug", "info", "warn", "error"]
LogSource = Literal["provisioner", "provisioner_daemon"]
LOG_LEVELS: tuple[LogLevel, ...] = ("trace", "debug", "info", "warn", "error")
LOG_SOURCES: tuple[LogSource, ...] = ("provisioner", "provisioner_daemon")

STAGE_SETUP = "Setting up"
STAGE_PLAN = "Planning infrastructure"
STAGE_CLEANUP = "Cleaning up"


class LogLine(Message):
    """One line of a job's log as the daemon produces it: Terraform's output (source ``provisioner``) or the
    daemon's own words; an empty ``output`` from the daemon only marks where a stage begins."""

    level: LogLevel = "info"
    stage: str = ""
    output: str = ""
    source: LogSource = "provisioner"


class JobLog(Message):
    """A stored line (API.md "Logs"): ids rise within a job; the SSE stream's ``id:`` is this id."""

    id: int
    created_at: str
    source: LogSource
    level: LogLevel
    stage: str
    output: str


class ChangedParameter(Message):
    """A parameter whose value differs from the workspace's last good build (ephemeral ones never are: each build
    asks for them anew and none keeps them, so their values are never shown here)."""

    name: str
    label: str
    previous: str = ""
    value: str = ""
    mutable: bool = True


class FailureCause(Message):
    """Why a failed job failed, as its page, the API and the CLI show it: the error's first line, the resource
    Terraform was working on (an address such as ``null_resource.setup``; empty when none), and the stored log line
    where the error begins (None when the log has none, e.g. a daemon that went away)."""

    message: str
    resource: str = ""
    log_line_id: int | None = None
    # Terraform's own heading when the message is something more specific it wrapped ("local-exec provisioner
    # error" around the command's "fatal: unable to access ..."); empty when the message is the heading itself.
    summary: str = ""
    # On a workspace build: the parameters that changed since the workspace's last good build and that the failing
    # resource uses (or, when that cannot be known, all that changed: ``parameters_used`` False), and the likely fix:
    # "change_parameters" when one of them may be changed, else "retry".
    changed_parameters: tuple[ChangedParameter, ...] = ()
    parameters_used: bool = False
    likely_fix: str = ""


class LogStreamEnd(Message):
    """The last event of a job's log stream: how the job ended, and why when it failed."""

    status: str
    error: str = ""
    failure: FailureCause | None = None
