"""The Slipway workspace agent: runs inside a workspace and speaks only the HTTP/WebSocket protocol of README.md.

It never imports ``app``, ``workers`` or ``cli``: only the server touches the database.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

try:
    __version__ = version("slipway")
except PackageNotFoundError:
    # Installed from the server's bundle (which writes VERSION beside this file), or a checkout never installed.
    _bundled = Path(__file__).with_name("VERSION")
    __version__ = _bundled.read_text().strip() if _bundled.is_file() else "0.0.0+unknown"
