"""The translation of Terraform's `-json` event stream into build log lines."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from protocol.logs import LogLevel, LogLine

_LEVELS: Mapping[str, LogLevel] = {
    "trace": "trace",
    "debug": "debug",
    "info": "info",
    "warn": "warn",
    "warning": "warn",
    "error": "error",
}
APPLY_STAGES: Mapping[str, str] = {
    "start": "Starting workspace",
    "stop": "Stopping workspace",
    "destroy": "Destroying workspace",
}


LogCallback = Callable[[LogLine], None]

# A line of Terraform's own log (TF_LOG=debug, on stderr): "2026-11-27T03:00:00.000Z [DEBUG] provider: ...".
_TF_LOG_LINE = re.compile(r"^\S+ \[(TRACE|DEBUG|INFO|WARN|ERROR)\] ")


def tf_log_level(line: str) -> LogLevel | None:
    """The level of a line of Terraform's TF_LOG output, or None when ``line`` is not one (an error it printed)."""
    match = _TF_LOG_LINE.match(line)
    return _LEVELS[match.group(1).lower()] if match else None


def parse_event(line: str) -> dict[str, Any] | None:
    """One line of `terraform -json` output as an event, or None when the line is not a JSON object."""
    try:
        event = json.loads(line)
    except ValueError:
        return None
    return event if isinstance(event, dict) else None


def event_level(event: Mapping[str, Any]) -> LogLevel:
    return _LEVELS.get(str(event.get("@level", "info")).lower(), "info")


def event_lines(event: Mapping[str, Any]) -> Iterator[tuple[LogLevel, str]]:
    """The (level, text) lines a Terraform JSON event becomes in the build log."""
    level = event_level(event)
    diagnostic = event.get("diagnostic")
    if event.get("type") == "diagnostic" and isinstance(diagnostic, dict):
        for text in render_diagnostic(diagnostic):
            yield level, text
        return
    message = event.get("@message")
    if isinstance(message, str):
        yield level, message


def render_diagnostic(diagnostic: Mapping[str, Any]) -> list[str]:
    """Render a diagnostic the way the Terraform CLI prints it without colour: summary, location, code, detail.

    Each element is one log line, so a broken template reads in the build log as it would in a terminal.
    """
    severity = "Warning" if diagnostic.get("severity") == "warning" else "Error"
    lines = [f"{severity}: {diagnostic.get('summary', '')}"]
    where = diagnostic.get("range")
    if isinstance(where, dict):
        start: Mapping[str, Any] = where["start"] if isinstance(where.get("start"), dict) else {}
        location = f"  on {where.get('filename', '?')} line {start.get('line', '?')}"
        snippet = diagnostic.get("snippet")
        if isinstance(snippet, dict) and snippet.get("context"):
            location += f", in {snippet['context']}"
        lines.append("")
        if diagnostic.get("address"):  # the resource the error is about, as Terraform names it above the location
            lines.append(f"  with {diagnostic['address']},")
        lines.append(location + ":")
        if isinstance(snippet, dict) and isinstance(snippet.get("code"), str):
            first = int(snippet.get("start_line") or start.get("line") or 0)
            lines += [f"  {first + offset:>3}: {code}" for offset, code in enumerate(snippet["code"].splitlines())]
    detail = diagnostic.get("detail")
    if detail:
        lines += ["", *str(detail).splitlines()]
    return lines


def error_summaries(events: Sequence[Mapping[str, Any]]) -> list[str]:
    """Summaries of the error diagnostics among events, without repeats, in order."""
    summaries: list[str] = []
    for event in events:
        diagnostic = event.get("diagnostic")
        if not isinstance(diagnostic, dict) or diagnostic.get("severity") != "error":
            continue
        summary = str(diagnostic.get("summary", "")).strip()
        if summary and summary not in summaries:
            summaries.append(summary)
    return summaries


# `terraform init` has no -json output here; its first error is a generic preamble wrapped over two lines
# ("Terraform encountered problems during initialisation, including problems / with the configuration...").
_GENERIC_INIT_ERROR = "Terraform encountered problems during initiali"


def text_error_summaries(lines: Sequence[str]) -> list[str]:
    """The `Error: ...` headings of plain-text Terraform output, minus the generic init preamble."""
    summaries: list[str] = []
    for line in lines:
        text = line.strip().lstrip("│╷╵ ").strip()
        if not text.startswith("Error: "):
            continue
        summary = text.removeprefix("Error: ").strip()
        if summary and not summary.startswith(_GENERIC_INIT_ERROR) and summary not in summaries:
            summaries.append(summary)
    return summaries
