"""``python -m workers``: how `slipway server` starts its built-in daemons (settings come from the environment)."""

from __future__ import annotations

import logging
import os
import signal
import sys
from pathlib import Path

from protocol.codec import ProtocolError
from protocol.sandbox import SANDBOX_ENV, SandboxPolicy
from workers.client import psk_credential
from workers.daemon import DaemonConfig, run_daemon
from workers.sandbox import SandboxError, confine, make_undumpable
from workers.terraform.init_cache import DEFAULT_MAX_BYTES

log = logging.getLogger("slipway.provisioner")


def enter_sandbox() -> None:
    """Before any job: keep the templates this daemon runs away from the server's data (see workers/sandbox.py)."""
    # Our environment holds the daemon's key and Redis password: no process of this user may read it in /proc.
    make_undumpable()
    raw = os.environ.pop(SANDBOX_ENV, "")
    if not raw:
        return
    try:
        policy = SandboxPolicy.loads(raw)
    except ProtocolError as exc:  # only `slipway server` sets it: a mismatch of versions, never run unconfined
        sys.exit(f"slipway provisioner daemon: cannot read {SANDBOX_ENV}: {exc}")
    if tmp := os.environ.get("TMPDIR"):
        Path(tmp).mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        confine(policy)
    except SandboxError as exc:
        if policy.required:
            sys.exit(f"slipway provisioner daemon: refusing to run templates unconfined: {exc}")
        log.warning("Landlock is not available (%s); the daemon's own user keeps it away from the server's data", exc)


def main() -> None:
    # `slipway server` starts us with SIGINT blocked (app/server/processes.py, hold_sigint), so that a Ctrl-C that
    # comes while Python starts waits here rather than printing a traceback from the middle of an import. Until the
    # daemon takes over SIGINT (it then cancels its job), one means: stop, there is nothing to cancel yet.
    try:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
        _run()
    except KeyboardInterrupt:
        sys.exit(0)


def _run() -> None:
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = DaemonConfig(
            url=os.environ["SLIPWAY_URL"],
            credential=psk_credential(os.environ["SLIPWAY_PROVISIONER_DAEMON_PSK"]),
            redis_url=os.environ["SLIPWAY_PROVISIONER_REDIS_URL"],
            name=os.environ.get("SLIPWAY_PROVISIONER_DAEMON_NAME") or "builtin",
            cache_dir=Path(os.environ["SLIPWAY_PROVISIONER_CACHE_DIR"]),
            terraform_path=os.environ.get("SLIPWAY_TERRAFORM_PATH") or None,
            init_cache_bytes=int(os.environ.get("SLIPWAY_PROVISIONER_INIT_CACHE_SIZE") or DEFAULT_MAX_BYTES),
        )
    except KeyError as exc:
        sys.exit(f"slipway provisioner daemon: {exc.args[0]} is not set")
    enter_sandbox()
    sys.exit(run_daemon(config))


if __name__ == "__main__":
    main()
