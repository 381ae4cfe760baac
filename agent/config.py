"""The agent's configuration, parsed once from the environment (README "Configuration").

``SLIPWAY_AGENT_*`` wins over the ``CODER_AGENT_*`` names templates written for Coder already set. Problems are
one-line :class:`ConfigError` messages meant for the operator as they are.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from agent.runtime_dir import default_runtime_dir

PREFIXES = ("SLIPWAY_", "CODER_")
# Every variable that holds the token or says where it is; none of them reaches a script or a session.
TOKEN_VARIABLES = tuple(f"{prefix}AGENT_TOKEN{suffix}" for prefix in PREFIXES for suffix in ("", "_FILE"))


class ConfigError(ValueError):
    """The configuration is missing or malformed; the message names the variable."""


@dataclass(frozen=True)
class AgentConfig:
    url: str  # without a trailing slash
    token: str
    log_dir: Path
    # No SLIPWAY_AGENT_LOG_DIR: the log dir is one of the agent's own in the temp dir (agent/runtime_dir.py).
    default_log_dir: bool = False

    def __repr__(self) -> str:  # the token must never end up in a log line or a traceback
        return f"AgentConfig(url={self.url!r}, token=<hidden>, log_dir={str(self.log_dir)!r})"


def _first(environ: Mapping[str, str], name: str) -> tuple[str, str] | None:
    """The value of ``SLIPWAY_<name>`` or else ``CODER_<name>``, with the variable it came from."""
    for prefix in PREFIXES:
        value = environ.get(prefix + name, "").strip()
        if value:
            return prefix + name, value
    return None


def normalise_url(variable: str, raw: str) -> str:
    parts = urlsplit(raw)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{variable}={raw!r} is not an http:// or https:// URL")
    if parts.query or parts.fragment:
        raise ConfigError(f"{variable}={raw!r}: give the server's access URL without a query or fragment")
    return raw.rstrip("/")


def _token(environ: Mapping[str, str]) -> str:
    for prefix in PREFIXES:
        value = environ.get(f"{prefix}AGENT_TOKEN", "").strip()
        if value:
            return value
        path = environ.get(f"{prefix}AGENT_TOKEN_FILE", "").strip()
        if path:
            try:
                from_file = Path(path).read_text(encoding="utf-8").strip()
            except (OSError, UnicodeDecodeError) as exc:
                raise ConfigError(f"{prefix}AGENT_TOKEN_FILE={path!r} cannot be read: {exc}") from None
            if not from_file:
                raise ConfigError(f"{prefix}AGENT_TOKEN_FILE={path!r} is empty")
            return from_file
    raise ConfigError("no agent token: set SLIPWAY_AGENT_TOKEN or SLIPWAY_AGENT_TOKEN_FILE")


def load_config(environ: Mapping[str, str]) -> AgentConfig:
    found_url = _first(environ, "AGENT_URL")
    if found_url is None:
        raise ConfigError("no server URL: set SLIPWAY_AGENT_URL (e.g. http://127.0.0.1:3000/)")
    url = normalise_url(*found_url)
    token = _token(environ)
    found_dir = _first(environ, "AGENT_LOG_DIR")
    if found_dir is None:
        return AgentConfig(url=url, token=token, log_dir=default_runtime_dir(token), default_log_dir=True)
    return AgentConfig(url=url, token=token, log_dir=Path(found_dir[1]).expanduser())
