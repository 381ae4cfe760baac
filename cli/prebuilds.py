"""`slipway prebuilds pause|resume|status` (owners and template admins): the prebuilt workspaces' reconciler."""

from __future__ import annotations

import click

from cli.client import authenticated_client
from protocol.codec import JSON


@click.group()
def prebuilds() -> None:
    """Prebuilt workspaces: pause or resume their reconciliation, see every pool."""


def _show_paused(answer: JSON) -> None:
    paused = isinstance(answer, dict) and answer.get("reconciliation_paused") is True
    click.echo("Reconciliation is paused." if paused else "Reconciliation is running.")


@prebuilds.command("pause")
def pause() -> None:
    """Stop creating and deleting prebuilds (people still claim the ready ones)."""
    _show_paused(authenticated_client().put("/api/v2/prebuilds/settings", {"reconciliation_paused": True}))


@prebuilds.command("resume")
def resume() -> None:
    """Reconcile again."""
    _show_paused(authenticated_client().put("/api/v2/prebuilds/settings", {"reconciliation_paused": False}))


@prebuilds.command("status")
def status() -> None:
    """Whether reconciliation runs, and each pool: desired, running, ready, building, failing and why."""
    answer = authenticated_client().get("/api/v2/prebuilds/status")
    _show_paused(answer)
    pools = answer.get("pools") if isinstance(answer, dict) else None
    for pool in pools if isinstance(pools, list) else []:
        if not isinstance(pool, dict):
            continue
        line = (
            f"{pool.get('template_id')} {pool.get('preset_name')}: {pool.get('ready')} ready, "
            f"{pool.get('running')} running, {pool.get('building')} building of {pool.get('desired')}"
        )
        if pool.get("expired"):
            line += f"; {pool.get('expired')} expired, being replaced"
        if pool.get("failures"):
            line += (
                f"; {pool.get('failures')} failed ({pool.get('failure_reason')}), next try {pool.get('backoff_until')}"
            )
        click.echo(line)
