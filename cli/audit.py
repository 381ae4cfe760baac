"""`slipway audit [-q FILTER] [-o json]`, `slipway audit export`, `slipway audit verify` (owners and auditors)."""

from __future__ import annotations

import json
import sys
from urllib.parse import urlencode

import click

from cli.client import authenticated_client
from cli.output import ListOutput, list_options
from protocol.codec import JSON

COLUMNS = ["id", "time", "who", "ip", "action", "resource_type", "resource", "changes", "build_reason", "status"]


def _rows(answer: JSON) -> list[dict[str, object]]:
    entries = answer.get("audit_logs", []) if isinstance(answer, dict) else []
    rows = []
    for entry in entries if isinstance(entries, list) else []:
        if not isinstance(entry, dict):
            continue
        actor = entry.get("actor")
        diff = entry.get("diff")
        rows.append(
            {
                "id": entry.get("id"),
                "time": entry.get("time"),
                "who": actor.get("name") if isinstance(actor, dict) else "",
                "ip": entry.get("ip"),
                "action": entry.get("action"),
                "resource_type": entry.get("resource_type"),
                "resource": entry.get("resource_target") or entry.get("resource_id"),
                "changes": ",".join(sorted(diff)) if isinstance(diff, dict) else "",
                "build_reason": entry.get("build_reason") or "",
                "status": entry.get("status_code"),
            }
        )
    return rows


@click.group(invoke_without_command=True)
@click.option("--filter", "-q", "search", default="", help="resource_type: resource_id: action: username: date_from: "
              "date_to: build_reason: (Coder's audit filter).")  # fmt: skip
@click.option("--limit", default=25, show_default=True, type=click.IntRange(1, 1000), help="How many entries.")
@click.option("--before", type=click.IntRange(1), help="Entries older than this id (the last page's next_before).")
@list_options(available=COLUMNS, default=["id", "time", "who", "action", "resource_type", "resource", "changes"])
@click.pass_context
def audit(ctx: click.Context, search: str, limit: int, before: int | None, listing: ListOutput) -> None:
    """The audit log, newest first: who changed what, when and from where."""
    if ctx.invoked_subcommand is not None:
        return
    query = {"q": search, "limit": limit, **({"before": before} if before else {})}
    answer = authenticated_client().get(f"/api/v2/audit?{urlencode(query)}")
    listing.show(answer, lambda: _rows(answer))


@audit.command("export")
@click.option("--format", "fmt", type=click.Choice(["csv", "ndjson"]), default="ndjson", show_default=True)
@click.option("--filter", "-q", "search", default="", help="The same filter as `slipway audit -q`.")
@click.option("--output-file", "-f", type=click.Path(dir_okay=False, writable=True), help="Write here, not stdout.")
def export(fmt: str, search: str, output_file: str | None) -> None:
    """Every matching entry as CSV or NDJSON."""
    body = authenticated_client().download(f"/api/v2/audit/export?{urlencode({'format': fmt, 'q': search})}")
    if output_file:
        with open(output_file, "wb") as out:
            out.write(body)
    else:
        sys.stdout.buffer.write(body)


@audit.command("verify")
@click.option("--output", "-o", "output_format", type=click.Choice(["text", "json"]), default="text")
def verify(output_format: str) -> None:
    """Walk the hash chain; exit 1 and name the first entry where it breaks (changed or removed by hand)."""
    answer = authenticated_client().request("GET", "/api/v2/audit/verify")
    if not isinstance(answer, dict):
        raise click.ClickException("the server's answer was not understood")
    if output_format == "json":
        click.echo(json.dumps(answer, indent=2))
    elif answer.get("ok"):
        click.echo(f"The audit chain holds: {answer.get('checked')} entries verified.")
    else:
        click.echo(f"The audit chain breaks at entry {answer.get('broken_at')}: {answer.get('reason')}.", err=True)
    if not answer.get("ok"):
        sys.exit(1)
