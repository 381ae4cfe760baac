"""What other features add to a workspace's page (the agents feature adds a panel per agent), wired by
``create_app``: the workspace page renders each section and its live stream watches each section's state, without
this package knowing what the sections are."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from flask import Flask, current_app
from markupsafe import Markup

from app.users.models import User
from app.workspaces.models import Workspace

EXTENSION_KEY = "slipway_workspace_sections"


@dataclass(frozen=True)
class WorkspaceSection:
    # The SSE event the page's stream sends when the section's state changes (its parts re-read themselves on it).
    event: str
    # The section's HTML, below the workspace's builds.
    render: Callable[[Workspace, User], Markup]
    # What the stream compares between checks (by workspace id), and the relay keys whose notices trigger a check.
    live_state: Callable[[str], object]
    watch_keys: Callable[[object], list[str]]


def init_app(app: Flask, sections: Sequence[WorkspaceSection]) -> None:
    app.extensions[EXTENSION_KEY] = tuple(sections)


def workspace_sections() -> tuple[WorkspaceSection, ...]:
    sections: tuple[WorkspaceSection, ...] = current_app.extensions.get(EXTENSION_KEY, ())
    return sections
