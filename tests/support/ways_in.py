"""Run `slipway ssh|config-ssh|port-forward` as a separate process, the way a user (or OpenSSH) starts them.

A copy of the entry point can live wherever a test puts it, e.g. a directory whose name holds a space, to prove
that config-ssh's ProxyCommand quotes the path it writes.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SCRIPT = """#!{python}
from cli.main import main

main()
"""


def install_slipway(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    executable = directory / "slipway"
    executable.write_text(SCRIPT.format(python=sys.executable))
    executable.chmod(0o755)
    return executable


def client_env(tmp_path: Path, url: str | None = None, token: str | None = None) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("SLIPWAY_")}
    env["XDG_CONFIG_HOME"] = str(tmp_path / "xdg")
    if url is not None:
        env["SLIPWAY_URL"] = url
    if token is not None:
        env["SLIPWAY_SESSION_TOKEN"] = token
    return env


def run_slipway(
    executable: Path, *args: str, env: dict[str, str], input_text: str = "", timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(executable), *args], env=env, input=input_text, capture_output=True, text=True, timeout=timeout
    )
