"""``python -m workers``: how `slipway server` starts its built-in daemons (settings come from the environment)."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

from workers.client import psk_credential
from workers.daemon import DaemonConfig, run_daemon


def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = DaemonConfig(
            url=os.environ["SLIPWAY_URL"],
            credential=psk_credential(os.environ["SLIPWAY_PROVISIONER_DAEMON_PSK"]),
            redis_url=os.environ["SLIPWAY_PROVISIONER_REDIS_URL"],
            name=os.environ.get("SLIPWAY_PROVISIONER_DAEMON_NAME") or "builtin",
            cache_dir=Path(os.environ["SLIPWAY_PROVISIONER_CACHE_DIR"]),
            terraform_path=os.environ.get("SLIPWAY_TERRAFORM_PATH") or None,
        )
    except KeyError as exc:
        sys.exit(f"slipway provisioner daemon: {exc.args[0]} is not set")
    sys.exit(run_daemon(config))


if __name__ == "__main__":
    main()
