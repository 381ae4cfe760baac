"""Where the CLI keeps the server URL and session token (``<user config dir>/slipway/session.json``, mode 0600),
and the organisation ``--org`` means when it is not given (``<user config dir>/slipway/organization``, saved by
`slipway organizations set`)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import click

F = TypeVar("F", bound=Callable[..., object])


@dataclass(frozen=True)
class ClientConfig:
    url: str
    token: str


def config_path() -> Path:
    return Path(click.get_app_dir("slipway")) / "session.json"


def save_config(config: ClientConfig) -> Path:
    path = config_path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    # Create with 0600 from the start: the token must never be readable by others, even briefly.
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump({"url": config.url, "token": config.token}, handle)
    os.chmod(tmp, 0o600)
    tmp.replace(path)
    return path


def load_partial_config() -> ClientConfig:
    """The saved login, overridden field by field by SLIPWAY_URL and SLIPWAY_SESSION_TOKEN; either may be ""."""
    saved: dict[str, str] = {}
    path = config_path()
    if path.exists():
        try:
            saved = json.loads(path.read_text())
        except (OSError, ValueError):
            saved = {}
    url = os.environ.get("SLIPWAY_URL") or saved.get("url", "")
    token = os.environ.get("SLIPWAY_SESSION_TOKEN") or saved.get("token", "")
    return ClientConfig(url=url.rstrip("/"), token=token)


def load_config() -> ClientConfig | None:
    """The login to use, when both a URL and a token are known."""
    config = load_partial_config()
    return config if config.url and config.token else None


def forget_config() -> None:
    """Sign-out forgets the saved organisation too: it named one of that server's."""
    config_path().unlink(missing_ok=True)
    organization_path().unlink(missing_ok=True)


DEFAULT_ORGANIZATION = "default"
ORGANIZATION_ENV = "SLIPWAY_ORGANIZATION"


def organization_path() -> Path:
    return Path(click.get_app_dir("slipway")) / "organization"


def saved_organization() -> str:
    """The organisation saved by `slipway organizations set`, else the default one."""
    try:
        saved = organization_path().read_text().strip()
    except OSError:
        saved = ""
    return saved or DEFAULT_ORGANIZATION


def save_organization(name: str) -> Path:
    path = organization_path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    path.write_text(name + "\n")
    return path


def organization_option() -> Callable[[F], F]:
    """``--org NAME`` for every command that works within one organisation: SLIPWAY_ORGANIZATION, else the one
    `slipway organizations set` saved, else the default organisation."""
    return click.option(
        "--org",
        "organization",
        envvar=ORGANIZATION_ENV,
        default=saved_organization,
        show_default="the one `slipway organizations set` saved, else default",
        help="The organisation (name or id).",
    )
