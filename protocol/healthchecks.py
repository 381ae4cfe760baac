"""What an app's healthcheck asks of the app's answer (README "App health").

Coder's rule is the default: an ``http(s)://`` check passes on any status below 500, so an app that refuses a
request (401, 403, 404) still counts as up. A template may ask for more in the URL's fragment:
``http://localhost:8888/api/status#expect=2xx`` passes only on a 2xx; ``#expect=2xx,3xx`` also on a redirect;
``#expect=200,204`` on those codes alone. The fragment is the opt-in because it leaves the template as it was for
Coder: an HTTP client never sends a fragment, so Coder's agent checks the same URL with its own rule, and Coder's
provider takes the URL as it is. Other fragments mean nothing here either.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urlsplit

EXPECT = "expect="
WEBSOCKET_SCHEMES = ("ws", "wss")
SERVER_ERROR = 500
_CLASS = re.compile(r"^([1-5])xx$")
_CODE = re.compile(r"^[1-5][0-9][0-9]$")


class BadExpectation(ValueError):
    """A healthcheck's ``#expect=`` that names no status; the message says which part and what is accepted."""


@dataclass(frozen=True)
class StatusRule:
    """The statuses that pass: named codes, and whole classes (2 for 2xx); neither means Coder's rule."""

    codes: frozenset[int] = frozenset()
    classes: frozenset[int] = frozenset()

    @property
    def coder_default(self) -> bool:
        return not self.codes and not self.classes

    def passes(self, status: int) -> bool:
        if self.coder_default:
            return status < SERVER_ERROR
        return status in self.codes or status // 100 in self.classes


def status_rule(url: str) -> StatusRule:
    """The rule a healthcheck URL asks for (raises :class:`BadExpectation` for an ``#expect=`` it cannot read)."""
    address = urlsplit(url)
    if not address.fragment.startswith(EXPECT):
        return StatusRule()
    if address.scheme in WEBSOCKET_SCHEMES:
        raise BadExpectation(
            "a ws:// or wss:// healthcheck passes on an accepted upgrade (101) alone: #expect= is for http(s)://"
        )
    fragment = address.fragment
    codes: set[int] = set()
    classes: set[int] = set()
    for part in fragment[len(EXPECT) :].split(","):
        part = part.strip().lower()
        if whole := _CLASS.match(part):
            classes.add(int(whole.group(1)))
        elif _CODE.match(part):
            codes.add(int(part))
        else:
            raise BadExpectation(
                f"the healthcheck URL's #expect= has {part!r}: give status codes (200) or classes (2xx), "
                "separated by commas"
            )
    return StatusRule(frozenset(codes), frozenset(classes))
