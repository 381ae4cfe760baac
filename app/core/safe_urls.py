"""URLs that templates, agents and daemons hand us, made safe to put in a page as a link or an image.

A template author, or anyone who runs a daemon or an agent (a member's own user-scoped daemon, say), chooses these
strings. In an ``href`` a ``javascript:`` (or ``data:``, ``vbscript:``) URL runs script on the dashboard's origin
when someone clicks it, so only ``http`` and ``https`` pass, and, where asked, a path on this server (icons such
as Coder's ``/icon/code.svg``). Anything else becomes ``""``: callers show no link rather than a broken one.
"""

from __future__ import annotations

import re

ALLOWED_SCHEMES = ("http", "https")
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")
# Browsers drop tabs and newlines anywhere in a URL ("java\tscript:" is javascript:) and trim control characters
# and spaces at the ends; a value with any of these is refused rather than second-guessed.
_CONTROL_OR_SPACE = re.compile(r"[\x00-\x20\x7f-\x9f\u2028\u2029\ufeff]")


def safe_url(value: object, *, allow_path: bool = False) -> str:
    """``value`` when it is an absolute ``http(s)://host…`` URL (or, with ``allow_path``, a path on this server
    such as ``/icon/x.svg``), else ``""``."""
    if not isinstance(value, str):
        return ""
    url = value.strip(" ")
    if not url or _CONTROL_OR_SPACE.search(url):
        return ""
    scheme = _SCHEME.match(url)
    if scheme is not None:
        rest = url[scheme.end() :]
        # "http:example.com" is a relative reference in some parsers and a host in others: ask for the slashes.
        if scheme.group(1).lower() in ALLOWED_SCHEMES and rest.startswith("//") and len(rest) > 2:
            return url
        return ""
    # No scheme: only a path that stays on this server. "//host" and "/\host" are other hosts to a browser.
    if allow_path and url.startswith("/") and not url.startswith(("//", "/\\")):
        return url
    return ""


def safe_icon_url(value: object) -> str:
    """An icon: ``http(s)`` or a path on this server (templates written for Coder use ``/icon/…``, ``/emojis/…``)."""
    return safe_url(value, allow_path=True)
