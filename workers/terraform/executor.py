"""The Terraform executor: init, plan and apply of one job in its private work dir, with live logs and cancel."""

from __future__ import annotations

import fcntl
import json
import re
import shutil
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from protocol import timings as stages
from protocol.logs import STAGE_CLEANUP, STAGE_PLAN, STAGE_SETUP, LogLevel, LogLine
from workers.terraform.binary import TerraformBinary, find_terraform
from workers.terraform.init_cache import CachedInit
from workers.terraform.logs import (
    APPLY_STAGES,
    LogCallback,
    error_summaries,
    event_lines,
    parse_event,
    text_error_summaries,
    tf_log_level,
)
from workers.terraform.process import CommandCanceledError, CommandRunner, Stream
from workers.terraform.state import StateFormatError, state_to_show_json
from workers.timings import TimingRecorder, event_time, utc_stamp

Transition = Literal["start", "stop", "destroy"]

STATE_FILE = "terraform.tfstate"
PLAN_FILE = "terraform.tfplan"
NOTHING_TO_DO = "The terraform state does not exist, there is nothing to do"
DEFAULT_CANCEL_GRACE = 180.0  # Coder's exitTimeout: 3 minutes between the interrupt and the kill
PLUGIN_CACHE_LOCK_POLL = 0.1

_JOB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")


class TerraformError(Exception):
    """A Terraform step failed. `message` is what the job's error should say; `state` is what apply left behind."""

    def __init__(self, step: str, message: str, *, state: bytes | None = None) -> None:
        super().__init__(f"terraform {step}: {message}")
        self.step = step
        self.message = message
        self.state = state


class TerraformCanceledError(TerraformError):
    """The job was canceled while (or before) this step ran."""


@dataclass(frozen=True)
class PlanResult:
    # `terraform show -json` of the saved plan; None when there was nothing to plan (destroy without state).
    plan: dict[str, Any] | None


@dataclass(frozen=True)
class ApplyResult:
    # The raw terraform.tfstate bytes (what the server stores) and the state as `terraform show -json` shows it.
    state: bytes
    state_json: dict[str, Any] | None


OutputMode = Literal["text", "json", "capture"]
# What each step's bar in the waterfall says it did (init's words are Coder's).
_STEP_ACTIONS = {"init": "initializing terraform", "plan": "terraform plan", "show": "terraform show",
                 "apply": "terraform apply"}  # fmt: skip


@dataclass
class _StepOutput:
    """Collects one command's output and forwards its lines to the log.

    Modes: "text" logs plain stdout at info (init); "json" turns `-json` events into lines and keeps diagnostics
    (plan, apply); "capture" keeps stdout for the caller without logging it (show). stderr is logged at error.
    """

    stage: str
    mode: OutputMode
    log: LogCallback
    # A one-process plan-and-apply starts in the planning stage and moves here when Terraform starts applying.
    apply_stage: str | None = None
    # Where the step's timings go: its stage's bar (from `stage_started_at`) and its resources' bars.
    timings: TimingRecorder | None = None
    timing_stage: str = stages.STAGE_PLAN
    stage_started_at: str = field(default_factory=utc_stamp)
    captured: list[str] = field(default_factory=list)
    diagnostics: list[dict[str, Any]] = field(default_factory=list)
    text: list[str] = field(default_factory=list)
    # Plain-text output keeps its blank lines between paragraphs, as Terraform prints them (init's errors read as
    # boxes apart), but none before the first line or after the last, and one for a run of them.
    _printed_text: bool = False
    _blank_pending: bool = False

    def on_line(self, stream: Stream, line: str) -> None:
        if stream == "stderr":
            if (level := tf_log_level(line)) is not None:  # TF_LOG's debug output: its own level, not an error
                self._emit(level, line)
                return
            self.text.append(line)
            self._emit_text("error", line)
        elif self.mode == "capture":
            self.captured.append(line)
        elif self.mode == "json" and (event := parse_event(line)) is not None:
            if event.get("type") == "diagnostic":
                self.diagnostics.append(event)
            elif event.get("type") == "apply_start" and self.apply_stage is not None and _changes_something(event):
                self.stage, self.apply_stage = self.apply_stage, None
                self.log(LogLine(level="info", stage=self.stage, source="provisioner_daemon"))
                self._next_timing_stage(stages.STAGE_APPLY, event_time(event))
            if self.timings is not None:
                self.timings.on_event(self.timing_stage, event)
            for level, text in event_lines(event):
                self._emit(level, text)
        else:
            self.text.append(line)
            self._emit_text("info" if self.mode == "text" else "debug", line)

    def _next_timing_stage(self, stage: str, at: str) -> None:
        """Planning ended and applying began at ``at`` (the first change's own time: its bar starts then too)."""
        if self.timings is not None:
            self.timings.add(self.timing_stage, self.stage_started_at, action=_STEP_ACTIONS["apply"], ended_at=at)
        self.timing_stage, self.stage_started_at = stage, at

    def end_timings(self, action: str) -> None:
        """The step ended (however): its stage's bar ends now, and so do its resources' unfinished bars."""
        if self.timings is not None:
            self.timings.close_open()
            self.timings.add_stage(self.timing_stage, self.stage_started_at, action)

    def step(self, command: str) -> str:
        """The step to blame: a combined plan-and-apply that never reached applying failed while planning."""
        return "plan" if self.apply_stage is not None else command

    def on_notice(self, text: str) -> None:
        self.log(LogLine(level="warn", stage=self.stage, output=text, source="provisioner_daemon"))

    def error_message(self, exit_code: int) -> str:
        summaries = error_summaries(self.diagnostics) or text_error_summaries(self.text)
        return "; ".join(summaries) or f"exited with status {exit_code}"

    def _emit(self, level: LogLevel, text: str) -> None:
        self.log(LogLine(level=level, stage=self.stage, output=text))

    def _emit_text(self, level: LogLevel, line: str) -> None:
        if not line.strip():
            self._blank_pending = self._printed_text
            return
        if self._blank_pending:
            self._emit(level, "")
            self._blank_pending = False
        self._printed_text = True
        self._emit(level, line)


@contextmanager
def job_workdir(cache_dir: Path, job_id: str, log: LogCallback | None = None) -> Iterator[Path]:
    """A private, empty work dir `<cache_dir>/jobs/<job_id>` (mode 0700), removed when the block ends."""
    if not _JOB_ID.fullmatch(job_id):
        raise ValueError(f"job id {job_id!r} cannot be used as a directory name")
    path = cache_dir / "jobs" / job_id
    if path.exists():  # left behind by a daemon that crashed mid-job
        shutil.rmtree(path)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.mkdir(mode=0o700)
    try:
        yield path
    finally:
        if log is not None:
            log(LogLine(level="info", stage=STAGE_CLEANUP, source="provisioner_daemon"))
        _remove_tree(path, log)


def _remove_tree(path: Path, log: LogCallback | None) -> None:
    # A plugin that is still exiting can hold files open for a moment; Coder retries five times too.
    for attempt in range(5):
        try:
            shutil.rmtree(path)
            return
        except FileNotFoundError:
            return
        except OSError as exc:
            if attempt == 4:
                if log is not None:
                    log(
                        LogLine(
                            level="warn",
                            stage=STAGE_CLEANUP,
                            output=f"Could not remove the work dir: {exc}",
                            source="provisioner_daemon",
                        )
                    )
                return
            time.sleep(0.2 * (attempt + 1))


class TerraformExecutor:
    """Runs the Terraform steps of one job in `workdir` (which holds the extracted template).

    Every line goes to `log` on the calling thread while Terraform runs. `cancel()` is the only method that may
    be called from another thread.
    """

    def __init__(
        self,
        workdir: Path,
        *,
        env: Mapping[str, str],
        log: LogCallback,
        binary: TerraformBinary | None = None,
        cancel_grace: float = DEFAULT_CANCEL_GRACE,
        init_cache: CachedInit | None = None,
        timings: TimingRecorder | None = None,
    ) -> None:
        self.workdir = workdir
        self.init_cache = init_cache
        self.timings = timings
        self.env = dict(env)
        self.log = log
        self.binary = binary or find_terraform()
        self._runner = CommandRunner(grace=cancel_grace)
        self._nothing_to_do = False

    def cancel(self) -> None:
        """Thread-safe: SIGINT to the running terraform, SIGKILL after the grace interval; no further steps run."""
        self._runner.cancel()

    def kill(self) -> None:
        """Thread-safe: SIGKILL the running terraform now; no further steps run."""
        self._runner.kill()

    @property
    def canceled(self) -> bool:
        return self._runner.canceled

    # -- steps ------------------------------------------------------------------------------------------------

    def run_build(
        self, transition: Transition, *, state: bytes = b"", variables: Mapping[str, str] | None = None
    ) -> ApplyResult:
        """A workspace build: init, then plan and apply in one `terraform apply` (a build needs no plan JSON, and
        one process instead of plan, show and apply saves two provider start-ups). The log moves from the
        planning stage to the transition's stage when Terraform starts applying. A destroy without state
        succeeds without running terraform."""
        if transition == "destroy" and _is_empty(state):
            return self._nothing_to_destroy()
        self.init()
        self._stage_started(STAGE_PLAN)
        self._write_state(state)
        args = ["apply", "-no-color", "-auto-approve", "-input=false", "-json", "-refresh=true"]
        if transition == "destroy":
            args.append("-destroy")
        for name, value in (variables or {}).items():
            args += ["-var", f"{name}={value}"]
        return self._apply_and_read_state("apply", STAGE_PLAN, args, apply_stage=APPLY_STAGES[transition])

    def init(self) -> None:
        """``terraform init``, or a copy of the prepared one when this template's was cached (init_cache.py)."""
        self._stage_started(STAGE_SETUP)
        started_at = utc_stamp()
        if self.init_cache is not None and self.init_cache.restore(self.workdir, self.log):
            if self.timings is not None:
                self.timings.add_stage(stages.STAGE_INIT, started_at, "restoring the cached init")
            return
        with self._plugin_cache_lock():
            # From before the wait for the lock: waiting on another job's init is part of what this build waited.
            args = ["init", "-no-color", "-input=false"]
            self._run("init", STAGE_SETUP, args, mode="text", timing_stage=stages.STAGE_INIT, started_at=started_at)
        if self.init_cache is not None:
            self.init_cache.store(self.workdir)

    @contextmanager
    def _plugin_cache_lock(self) -> Iterator[None]:
        """One `terraform init` at a time per plugin cache: Terraform does not support concurrent use (two inits
        installing the same provider fail with "file exists"). Each daemon has its own cache (RunnerSettings), so
        this only guards a cache shared by design (tests, or a daemon's cache dir given to another)."""
        cache = self.env.get("TF_PLUGIN_CACHE_DIR")
        if not cache:
            yield
            return
        with open(Path(cache) / ".slipway-init.lock", "a") as lock_file:
            while True:
                try:
                    fcntl.flock(lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if self.canceled:  # waiting must not outlive a cancel
                        raise TerraformCanceledError("init", "the job was canceled") from None
                    time.sleep(PLUGIN_CACHE_LOCK_POLL)
            try:
                yield
            finally:
                fcntl.flock(lock_file, fcntl.LOCK_UN)

    def plan(
        self, transition: Transition, *, state: bytes = b"", variables: Mapping[str, str] | None = None
    ) -> PlanResult:
        """Write the previous state, plan (saving terraform.tfplan) and return the plan as JSON."""
        self._stage_started(STAGE_PLAN)
        if transition == "destroy" and _is_empty(state):
            self._nothing_to_destroy()
            return PlanResult(None)
        self._nothing_to_do = False
        self._write_state(state)
        args = ["plan", "-no-color", "-input=false", "-json", "-refresh=true", f"-out={self.workdir / PLAN_FILE}"]
        if transition == "destroy":
            args.append("-destroy")
        for name, value in (variables or {}).items():
            args += ["-var", f"{name}={value}"]
        self._run("plan", STAGE_PLAN, args, mode="json", timing_stage=stages.STAGE_PLAN)
        show = ["show", "-json", "-no-color", PLAN_FILE]
        shown = self._run("show", STAGE_PLAN, show, mode="capture", timing_stage=stages.STAGE_GRAPH)
        return PlanResult(_parse_json("show", shown.captured))

    def apply(self, transition: Transition) -> ApplyResult:
        """Apply the saved plan. On failure the TerraformError carries the state Terraform left behind."""
        if self._nothing_to_do:
            return ApplyResult(b"", None)
        stage = APPLY_STAGES[transition]
        self._stage_started(stage)
        args = ["apply", "-no-color", "-auto-approve", "-input=false", "-json", str(self.workdir / PLAN_FILE)]
        return self._apply_and_read_state("apply", stage, args, timing_stage=stages.STAGE_APPLY)

    def saved_plan(self) -> bytes:
        """The plan file the last :meth:`plan` wrote (what a person confirms)."""
        return (self.workdir / PLAN_FILE).read_bytes()

    def apply_confirmed(self, transition: Transition, plan: bytes, state: bytes) -> ApplyResult | None:
        """Apply a plan a person confirmed, against the state it was made from. None when Terraform refuses it as
        stale (the state moved on since): the caller plans again rather than apply something nobody saw."""
        self._nothing_to_do = False
        self._write_state(state)
        (self.workdir / PLAN_FILE).write_bytes(plan)
        try:
            return self.apply(transition)
        except TerraformError as exc:
            if "plan is stale" not in exc.message.lower():
                raise
            stale = "The confirmed plan is stale (the state changed since): planning again."
            self.log(LogLine(level="warn", stage=APPLY_STAGES[transition], source="provisioner_daemon", output=stale))
            return None

    def _apply_and_read_state(
        self, step: str, stage: str, args: list[str], *, apply_stage: str | None = None,
        timing_stage: str = stages.STAGE_PLAN,
    ) -> ApplyResult:  # fmt: skip
        try:
            self._run(step, stage, args, mode="json", apply_stage=apply_stage, timing_stage=timing_stage)
        except TerraformError as exc:
            # Resources created before the failure are in the state: losing it would orphan them.
            exc.state = self._read_state()
            raise
        state = self._read_state()
        try:
            return ApplyResult(state, state_to_show_json(state))
        except StateFormatError as exc:
            raise TerraformError(step, str(exc), state=state) from exc

    # -- plumbing ---------------------------------------------------------------------------------------------

    def _nothing_to_destroy(self) -> ApplyResult:
        self._nothing_to_do = True
        self.log(LogLine(level="info", stage=APPLY_STAGES["destroy"], output=NOTHING_TO_DO))
        return ApplyResult(b"", None)

    def _stage_started(self, stage: str) -> None:
        # Like Coder's daemon: an empty line from the daemon marks where a stage begins.
        self.log(LogLine(level="info", stage=stage, source="provisioner_daemon"))

    def _write_state(self, state: bytes) -> None:
        path = self.workdir / STATE_FILE
        if _is_empty(state):
            path.unlink(missing_ok=True)
        else:
            path.write_bytes(state)
            path.chmod(0o600)

    def _read_state(self) -> bytes:
        try:
            return (self.workdir / STATE_FILE).read_bytes()
        except FileNotFoundError:
            return b""

    def _run(
        self, step: str, stage: str, args: list[str], *, mode: OutputMode, apply_stage: str | None = None,
        timing_stage: str | None = None, started_at: str | None = None,
    ) -> _StepOutput:  # fmt: skip
        """Run one terraform command; with ``timing_stage`` it is a bar of the waterfall (from ``started_at``)."""
        timings = self.timings if timing_stage is not None else None
        output = _StepOutput(stage, mode, self.log, apply_stage, timings, timing_stage or stages.STAGE_PLAN)
        if started_at is not None:
            output.stage_started_at = started_at
        try:
            return self._run_step(step, args, output)
        finally:
            output.end_timings(_STEP_ACTIONS.get(step, f"terraform {step}"))

    def _run_step(self, step: str, args: list[str], output: _StepOutput) -> _StepOutput:
        try:
            exit_code = self._runner.run(
                self.binary.argv(*args),
                cwd=self.workdir,
                env=self.env,
                on_line=output.on_line,
                on_notice=output.on_notice,
            )
        except CommandCanceledError:
            raise TerraformCanceledError(output.step(step), "the job was canceled") from None
        except OSError as exc:
            raise TerraformError(step, f"could not start terraform: {exc}") from exc
        step = output.step(step)
        if exit_code != 0:
            message = output.error_message(exit_code)
            if self._runner.canceled:
                raise TerraformCanceledError(step, f"the job was canceled ({message})")
            raise TerraformError(step, message)
        return output


def _changes_something(event: Mapping[str, Any]) -> bool:
    """Terraform reports data-source reads while planning as apply_start events too (action "read")."""
    hook = event.get("hook")
    return not (isinstance(hook, Mapping) and hook.get("action") == "read")


def _is_empty(state: bytes) -> bool:
    return not state.strip()


def _parse_json(step: str, lines: list[str]) -> dict[str, Any]:
    try:
        value = json.loads("\n".join(lines))
    except ValueError as exc:
        raise TerraformError(step, f"terraform printed invalid JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise TerraformError(step, "terraform printed JSON that is not an object")
    return value
