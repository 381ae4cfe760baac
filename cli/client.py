"""A thin HTTP client for the Slipway API that turns every failure into one readable CLI error."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar
from urllib.parse import parse_qs, urlsplit

import click
import httpx

from cli.config import ClientConfig, load_config
from cli.errors import CliError, status_hint
from cli.sse import parse_events
from protocol.codec import JSON, Message, ProtocolError, decode_list
from protocol.publicapi import ErrorBody, Validation

M = TypeVar("M", bound=Message)

TIMEOUT = httpx.Timeout(30.0, connect=10.0)
# Lists answer a page at a time and say in this header how many rows there are; the CLI reads them all.
TOTAL_HEADER = "X-Total-Count"
PAGE_LIMIT = 1000
SUCCESS = (200, 201, 204)


class ApiError(CliError):
    """The server refused: its message (and each invalid field on its own line), and a hint by status."""

    def __init__(self, status: int, message: str, validations: Sequence[Validation] = ()):
        details = "".join(f"\n  {item.field}: {item.detail}" for item in validations)
        super().__init__(f"{message}{details}", status_hint(status))
        self.status = status
        self.validations = tuple(validations)


class SlipwayClient:
    def __init__(self, url: str, token: str | None = None, *, transport: httpx.BaseTransport | None = None):
        self.url = url.rstrip("/")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(base_url=self.url, headers=headers, timeout=TIMEOUT, transport=transport)

    def request(
        self,
        method: str,
        path: str,
        *,
        json: JSON = None,
        content: bytes | None = None,
        headers: dict[str, str] | None = None,
        expect: tuple[int, ...] = SUCCESS,
    ) -> JSON:
        """The answer's JSON as it came (``--output json`` prints it unchanged); ``None`` for an empty answer."""
        send = functools.partial(self._http.request, method, path, json=json, content=content, headers=headers)
        return _answer(self._checked(send, expect))

    def _checked(self, send: Callable[[], httpx.Response], expect: tuple[int, ...]) -> httpx.Response:
        """``send()``'s response when its status is one of ``expect``; else one readable CLI error."""
        try:
            response = send()
        except httpx.HTTPError as exc:
            raise CliError(
                f"cannot reach {self.url}: {exc}",
                "is the server up and the URL right? `slipway login <url>` or SLIPWAY_URL sets it.",
            ) from exc
        if response.status_code not in expect:
            raise _error_from(response)
        return response

    def stream_events(self, path: str) -> Iterator[tuple[str, str]]:
        """Server-Sent Events from ``path`` as (event, data) pairs; no read timeout (heartbeats keep it alive)."""
        timeout = httpx.Timeout(30.0, read=None)
        with self._http.stream("GET", path, timeout=timeout) as response:
            if response.status_code != 200:
                response.read()
                raise _error_from(response)
            yield from parse_events(response.iter_lines())

    def get(self, path: str) -> JSON:
        """The answer's JSON; a list is read to its end, page after page, unless ``path`` asks for one page."""
        response = self._checked(functools.partial(self._http.get, path), SUCCESS)
        answer = _answer(response)
        total = response.headers.get(TOTAL_HEADER, "")
        if not isinstance(answer, list) or not total.isdigit() or _asks_for_a_page(path):
            return answer
        pages = [answer]
        read = len(answer)
        while answer and read < int(total):
            separator = "&" if "?" in path else "?"
            answer = self.request("GET", f"{path}{separator}limit={PAGE_LIMIT}&offset={read}")
            if not isinstance(answer, list):
                break
            pages.append(answer)
            read += len(answer)
        return [item for page in pages for item in page]

    def download(self, path: str) -> bytes:
        """A body that is not JSON (a template archive), as it came."""
        try:
            response = self._http.get(path)
        except httpx.HTTPError as exc:
            raise click.ClickException(f"cannot reach {self.url}: {exc}") from exc
        if response.status_code != 200:
            raise _error_from(response)
        return response.content

    def get_one(self, message: type[M], path: str) -> M:
        return decoded(message, self.get(path), f"GET {path}")

    def get_list(self, message: type[M], path: str) -> list[M]:
        return decoded_list(message, self.get(path), f"GET {path}")

    def post(self, message: type[M], path: str, body: JSON) -> M:
        return decoded(message, self.request("POST", path, json=body), f"POST {path}")

    def put(self, path: str, body: JSON) -> JSON:
        return self.request("PUT", path, json=body)


def _answer(response: httpx.Response) -> JSON:
    if response.status_code == 204 or not response.content:
        return None
    answer: JSON = response.json()
    return answer


def _asks_for_a_page(path: str) -> bool:
    query = parse_qs(urlsplit(path).query)
    return "limit" in query or "offset" in query


def decoded(message: type[M], answer: JSON, call: str) -> M:
    """The server's answer read as ``message`` (public API types, protocol/publicapi.py); one clear error if not."""
    try:
        return message.from_json(answer)
    except ProtocolError as exc:
        raise _not_understood(call, exc) from exc


def decoded_list(message: type[M], answer: JSON, call: str) -> list[M]:
    try:
        return decode_list(message, answer)
    except ProtocolError as exc:
        raise _not_understood(call, exc) from exc


def _not_understood(call: str, problem: ProtocolError) -> click.ClickException:
    return click.ClickException(
        f"the server's answer to {call} is not what this CLI understands ({problem}); is the CLI much older or "
        "newer than the server?"
    )


def _error_from(response: httpx.Response) -> ApiError:
    try:
        body = ErrorBody.from_json(response.json())
    except (ValueError, ProtocolError):  # not JSON, or not ours (a proxy's error page)
        body = ErrorBody()
    message = body.message or f"{response.status_code} {response.reason_phrase}"
    return ApiError(response.status_code, message, body.validations)


def authenticated_client() -> SlipwayClient:
    config: ClientConfig | None = load_config()
    if config is None:
        raise click.ClickException(
            "You are not signed in. Run `slipway login <url>`, or set SLIPWAY_URL and SLIPWAY_SESSION_TOKEN."
        )
    return SlipwayClient(config.url, config.token)


def key_value_pairs(values: tuple[str, ...] | list[str], what: str) -> dict[str, str]:
    """``("k=v", ...)`` from repeated options, split on the first ``=``."""
    result = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"{what} look like key=value, got {item!r}")
        result[key.strip()] = value.strip()
    return result
