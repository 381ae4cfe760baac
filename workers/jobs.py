"""The function an RQ job names (``protocol.provisionerd.RUN_JOB_FUNCTION``): RQ calls it by import path with
the job id, and it hands the id to the runner of the worker that dequeued it."""

from __future__ import annotations

from contextvars import ContextVar

from workers.runner import JobRunner

# Set by the RQ adapter around each job it performs (RQ runs it on the worker's own thread: no fork).
current_runner: ContextVar[JobRunner] = ContextVar("current_runner")


def run_provisioner_job(job_id: str) -> None:
    try:
        runner = current_runner.get()
    except LookupError:
        raise RuntimeError("run_provisioner_job runs only inside a Slipway provisioner daemon") from None
    runner.run_job_id(job_id)
