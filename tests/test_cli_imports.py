"""The CLI starts at once: a command imports what it needs and nothing of the server (Flask, SQLAlchemy, Redis,
gevent), of httpx's own command line (rich, pygments), of the parameter rules (RE2) or of package metadata. Timed
nowhere (the machine may be busy): each command runs in a fresh interpreter, against a port nothing listens on,
and what it had imported by its exit is checked."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# What none of these commands may import: each costs tens to hundreds of milliseconds of start-up.
HEAVY = (
    "app",
    "flask",
    "werkzeug",
    "jinja2",
    "sqlalchemy",
    "alembic",
    "redis",
    "gevent",
    "rich",
    "pygments",
    "re2",
    "importlib.metadata",
    "protocol.provisionerd",
    "protocol.parameters",
)
REPORT = """
import atexit, json, sys
atexit.register(lambda: print(json.dumps(sorted(sys.modules)), file=sys.__stderr__))
sys.argv = ["slipway", *sys.argv[1:]]
from cli.main import main
main()
"""


def modules_imported_by(arguments: list[str], home: Path) -> set[str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("SLIPWAY_")}
    # Port 9 (discard) on loopback: nothing answers, so the command fails at its first request, as fast as it can.
    env.update(SLIPWAY_URL="http://127.0.0.1:9", SLIPWAY_SESSION_TOKEN="x" * 32, HOME=str(home))
    env["XDG_CONFIG_HOME"] = str(home / "config")
    done = subprocess.run(
        [sys.executable, "-c", REPORT, *arguments], env=env, capture_output=True, text=True, timeout=120
    )
    last = done.stderr.strip().splitlines()[-1]
    imported = set(json.loads(last))
    assert "cli.client" in imported, done.stderr  # it did get as far as the client
    return imported


@pytest.mark.parametrize(
    "arguments", [["list"], ["show", "dev"], ["whoami"], ["ssh", "dev", "--", "true"]], ids=" ".join
)
def test_client_commands_import_nothing_heavy(arguments: list[str], tmp_path: Path) -> None:
    imported = modules_imported_by(arguments, tmp_path)
    # websockets (`ssh`'s tunnel) reads its own version through importlib.metadata: not ours to cut.
    allowed = {"importlib.metadata"} if arguments[0] == "ssh" else set()
    heavy = sorted(
        name for name in imported if any(name == h or name.startswith(f"{h}.") for h in HEAVY if h not in allowed)
    )
    assert heavy == []
