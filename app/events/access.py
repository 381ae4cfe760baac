"""Losing access is a live event: a share taken away (or a group left) must end the connections it allowed at once,
not when they next reconnect. Whoever changes who may use a workspace calls :func:`access_lost`; the features that
hold connections (app/agents: SSH, terminals, port forwards, apps) register a watcher that re-checks theirs against
the one rule and closes the ones it no longer allows. This module sits low so that any feature may report a loss
without importing the ones that hold connections."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from flask import Flask, current_app

EXTENSION_KEY = "slipway_access_watchers"
# (workspace_id, user_id): either may be None (every person of that workspace, every workspace of that person).
AccessWatcher = Callable[[str | None, str | None], None]


def init_app(app: Flask, watchers: Sequence[AccessWatcher]) -> None:
    app.extensions[EXTENSION_KEY] = tuple(watchers)


def access_lost(*, workspace_id: str | None = None, user_id: str | None = None) -> None:
    """Called after the change is committed: the watchers read the database to decide."""
    watchers: tuple[AccessWatcher, ...] = current_app.extensions.get(EXTENSION_KEY, ())
    for watcher in watchers:
        watcher(workspace_id, user_id)
