"""The Slipway workspace agent: runs inside a workspace and speaks only the HTTP/WebSocket protocol of README.md.

It never imports ``app``, ``workers`` or ``cli``: only the server touches the database.
"""

from __future__ import annotations

import functools
from pathlib import Path

import protocol  # noqa: F401 - first: it keeps httpx from importing its command-line client (see there)


@functools.cache
def _version() -> str:
    # importlib.metadata costs ~35 ms to import: git's helpers (agent.git, run per credential prompt) never need it.
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("slipway")
    except PackageNotFoundError:
        # Installed from the server's bundle (which writes VERSION beside this file), or a checkout never installed.
        bundled = Path(__file__).with_name("VERSION")
        return bundled.read_text().strip() if bundled.is_file() else "0.0.0+unknown"


def __getattr__(name: str) -> str:
    if name == "__version__":
        return _version()
    raise AttributeError(f"module 'agent' has no attribute {name!r}")
