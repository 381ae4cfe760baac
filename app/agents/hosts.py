"""Subdomain app hosts: Coder's ``{app}--{agent}--{workspace}--{owner}`` label under the wildcard access URL.

A port takes the app's place (``8080--main--ws--alice``; ``8443s--…`` for an app that speaks TLS). Names never
hold ``--`` (usernames, workspace names, slugs), so the label splits in one way only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urlsplit

SEPARATOR = "--"
_PORT = re.compile(r"^(?P<port>[0-9]{1,5})(?P<tls>s?)$")
# A label as DNS allows it, less strict on "_" (Terraform names of agents carry it and browsers accept it).
_LABEL_PART = re.compile(r"^[a-z0-9_]+(?:-[a-z0-9_]+)*$")


@dataclass(frozen=True)
class Wildcard:
    """The parsed ``--wildcard-access-url``: what the ``*`` stands in front of, and the port, if any."""

    suffix: str  # ".apps.example.com" or "--apps.example.com"
    port: int | None
    scheme: str  # the access URL's

    @classmethod
    def parse(cls, pattern: str, access_url: str) -> Wildcard | None:
        if not pattern:
            return None
        host, _, port = pattern[1:].partition(":")
        return cls(host, int(port) if port else None, urlsplit(access_url).scheme or "http")

    @property
    def host(self) -> str:
        """As Coder's ``GET /api/v2/applications/host`` gives it."""
        return f"*{self.suffix}" + (f":{self.port}" if self.port else "")

    def url(self, label: str, path: str = "/") -> str:
        port = f":{self.port}" if self.port else ""
        return f"{self.scheme}://{label}{self.suffix}{port}{path}"

    def label_of(self, host: str) -> str | None:
        """The part of ``host`` (a Host header, port and all) the ``*`` matched; None when it is not one of ours."""
        name = host.lower().rsplit(":", 1)[0] if not host.endswith("]") else host.lower()
        name = name.rstrip(".")  # "app.example.com." is the same name to DNS, and must not reach the dashboard
        if not name.endswith(self.suffix):
            return None
        label = name[: -len(self.suffix)]
        return label if label and "." not in label else None


@dataclass(frozen=True)
class AppHost:
    """What an app host names. Exactly one of ``slug`` and ``port`` is set."""

    owner: str
    workspace: str
    agent: str
    slug: str = ""
    port: int = 0
    tls: bool = False

    @property
    def label(self) -> str:
        first = self.slug or f"{self.port}{'s' if self.tls else ''}"
        return SEPARATOR.join((first, self.agent, self.workspace, self.owner)).lower()


class NotAnAppHost(ValueError):
    """The host is under the wildcard but names no app; the message says what is wrong with it."""


def parse_label(label: str) -> AppHost:
    parts = label.lower().split(SEPARATOR)
    if len(parts) != 4 or not all(_LABEL_PART.match(part) for part in parts):
        raise NotAnAppHost(
            f"{label!r} is not an app address: one looks like app--agent--workspace--owner (or a port for the app)."
        )
    first, agent, workspace, owner = parts
    port = _PORT.match(first)
    if port is None:
        return AppHost(owner, workspace, agent, slug=first)
    number = int(port["port"])
    if not 1 <= number <= 65535:
        raise NotAnAppHost(f"{number} is not a TCP port (1-65535).")
    return AppHost(owner, workspace, agent, port=number, tls=bool(port["tls"]))


def app_url(wildcard: Wildcard, host: AppHost, path: str = "/") -> str:
    return wildcard.url(host.label, path)
