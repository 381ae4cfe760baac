"""A thin HTTP client for the Slipway API that turns every failure into one readable CLI error."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import click
import httpx

from cli.config import ClientConfig, load_config
from cli.sse import parse_events

TIMEOUT = httpx.Timeout(30.0, connect=10.0)


class ApiError(click.ClickException):
    def __init__(self, status: int, message: str, validations: list[dict[str, str]] | None = None):
        details = "".join(f"\n  {item['field']}: {item['detail']}" for item in validations or [])
        super().__init__(f"{message}{details}")
        self.status = status


class SlipwayClient:
    def __init__(self, url: str, token: str | None = None):
        self.url = url.rstrip("/")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(base_url=self.url, headers=headers, timeout=TIMEOUT)

    def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        content: bytes | None = None,
        headers: dict[str, str] | None = None,
        expect: tuple[int, ...] = (200, 201, 204),
    ) -> Any:
        try:
            response = self._http.request(method, path, json=json, content=content, headers=headers)
        except httpx.HTTPError as exc:
            raise click.ClickException(f"cannot reach {self.url}: {exc}") from exc
        if response.status_code not in expect:
            raise _error_from(response)
        if response.status_code == 204 or not response.content:
            return None
        return response.json()

    def stream_events(self, path: str) -> Iterator[tuple[str, str]]:
        """Server-Sent Events from ``path`` as (event, data) pairs; no read timeout (heartbeats keep it alive)."""
        timeout = httpx.Timeout(30.0, read=None)
        with self._http.stream("GET", path, timeout=timeout) as response:
            if response.status_code != 200:
                response.read()
                raise _error_from(response)
            yield from parse_events(response.iter_lines())

    def get(self, path: str) -> Any:
        return self.request("GET", path)

    def post(self, path: str, body: Any) -> Any:
        return self.request("POST", path, json=body)


def _error_from(response: httpx.Response) -> ApiError:
    try:
        body = response.json()
        message = body.get("message") or response.reason_phrase
        validations = body.get("validations")
    except ValueError:
        message, validations = f"{response.status_code} {response.reason_phrase}", None
    if response.status_code == 401:
        message += " (run `slipway login <url>`)"
    return ApiError(response.status_code, message, validations)


def authenticated_client() -> SlipwayClient:
    config: ClientConfig | None = load_config()
    if config is None:
        raise click.ClickException(
            "You are not signed in. Run `slipway login <url>`, or set SLIPWAY_URL and SLIPWAY_SESSION_TOKEN."
        )
    return SlipwayClient(config.url, config.token)


def print_table(rows: list[dict[str, Any]], columns: list[str]) -> None:
    """Aligned columns, like `coder list`; ``--output json`` callers print the raw rows instead."""
    cells = [[str(row.get(column, "") if row.get(column) is not None else "") for column in columns] for row in rows]
    widths = [max([len(column)] + [len(line[i]) for line in cells]) for i, column in enumerate(columns)]
    click.echo("  ".join(column.upper().ljust(widths[i]) for i, column in enumerate(columns)).rstrip())
    for line in cells:
        click.echo("  ".join(value.ljust(widths[i]) for i, value in enumerate(line)).rstrip())


def key_value_pairs(values: tuple[str, ...] | list[str], what: str) -> dict[str, str]:
    """``("k=v", ...)`` from repeated options, split on the first ``=``."""
    result = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"{what} look like key=value, got {item!r}")
        result[key.strip()] = value.strip()
    return result


output_option = click.option(
    "--output",
    "-o",
    type=click.Choice(["table", "json"]),
    default="table",
    show_default=True,
    help="Output format.",
)
