"""This server's release, as the installed package says (what agents and daemons are compared with)."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version


def server_version() -> str:
    try:
        return version("slipway")
    except PackageNotFoundError:  # a checkout never installed
        return "0.0.0+unknown"
