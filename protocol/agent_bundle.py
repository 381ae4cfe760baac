"""The agent bundle's layout, shared by its builder (`slipway agent-bundle`), the server that serves it, and the
init script that installs it in a workspace: which platforms, which Python versions, which files where."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

# The agent's third-party dependencies; their versions are pinned to what the server itself runs.
AGENT_DEPENDENCIES = ("asyncssh", "websockets", "httpx")
# The packages of ours a workspace runs: the agent, and the messages it shares with the server.
AGENT_PACKAGES = ("agent", "protocol")
PYTHON_VERSIONS = ("3.11", "3.12", "3.13")
BUNDLE_ROOT = "slipway-agent"
REQUIREMENTS = "requirements.txt"
VERSIONS_FILE = "python-versions.txt"


def default_agent_wheelhouse() -> Path:
    # Beside the installation itself: a virtualenv and its wheelhouse are built, upgraded and removed together.
    return Path(sys.prefix) / "share" / "slipway" / "agent-wheels"


@dataclass(frozen=True)
class Platform:
    os: str
    arch: str
    # pip's --platform values, most preferred first.
    pip_platforms: tuple[str, ...]

    @property
    def name(self) -> str:
        return f"{self.os}-{self.arch}"


def _manylinux(arch: str) -> tuple[str, ...]:
    # pip prefers earlier tags: the oldest glibc first, so each wheel runs on as many distributions as it can, and
    # newer tags only for packages that ship nothing older.
    return (f"manylinux2014_{arch}", *(f"manylinux_2_{minor}_{arch}" for minor in range(17, 40)))


PLATFORMS: dict[str, Platform] = {
    platform.name: platform
    for platform in (
        Platform("linux", "amd64", _manylinux("x86_64")),
        Platform("linux", "arm64", _manylinux("aarch64")),
        Platform("linux", "armv7", _manylinux("armv7l")),
        # pip widens a macOS tag to every older macOS release and to universal2 wheels.
        Platform("darwin", "amd64", ("macosx_11_0_x86_64",)),
        Platform("darwin", "arm64", ("macosx_11_0_arm64",)),
        Platform("windows", "amd64", ("win_amd64",)),
        Platform("windows", "arm64", ("win_arm64",)),
    )
}
# Windows workspaces are rare enough to be built on request (`slipway agent-bundle --platform windows-amd64`).
DEFAULT_PLATFORMS = tuple(name for name in PLATFORMS if not name.startswith("windows"))
