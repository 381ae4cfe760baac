"""The one rule for URLs that templates, agents and daemons choose: only http(s) (and, for icons, a path on this
server) may become a link or an image."""

from __future__ import annotations

import pytest

from app.agents.apps import app_path
from app.core.markdown_render import render_markdown
from app.core.safe_urls import safe_icon_url, safe_url

# Each of these runs script (or leaves the site) when clicked, as a browser parses it.
SCRIPT_URLS = [
    "javascript:alert(document.cookie)",
    "JaVaScRiPt:alert(1)",
    " javascript:alert(1)",
    "\x01javascript:alert(1)",
    "java\tscript:alert(1)",
    "java\nscript:alert(1)",
    "javascript\r:alert(1)",
    "data:text/html,<script>alert(1)</script>",
    "data:image/svg+xml;base64,PHN2Zz48L3N2Zz4=",
    "vbscript:msgbox(1)",
    "file:///etc/passwd",
    "jar:http://example.com!/x",
]


@pytest.mark.parametrize("url", SCRIPT_URLS)
def test_script_and_other_schemes_become_empty(url: str) -> None:
    assert safe_url(url) == ""
    assert safe_icon_url(url) == ""


@pytest.mark.parametrize(
    "url", ["https://docs.example.com/agents#troubleshooting", "http://10.0.0.1:8080/x?a=b", "HTTPS://EXAMPLE.COM"]
)
def test_http_and_https_urls_pass_unchanged(url: str) -> None:
    assert safe_url(url) == url
    assert safe_icon_url(url) == url


@pytest.mark.parametrize(
    "url",
    ["", "http:", "https://", "http:example.com", "https:\\\\evil.example", "//evil.example/x", "/\\evil.example",
     "relative/path", "/icon/code.svg", "https://example.com/a b", None, 42, ["https://example.com"]],
)  # fmt: skip
def test_links_need_an_absolute_http_url(url: object) -> None:
    assert safe_url(url) == ""


def test_icons_may_also_be_paths_on_this_server() -> None:
    assert safe_icon_url("/icon/code.svg") == "/icon/code.svg"
    assert safe_icon_url("/emojis/1f4bb.png") == "/emojis/1f4bb.png"
    for other_host in ("//evil.example/x.svg", "/\\evil.example/x.svg", "icon/code.svg"):
        assert safe_icon_url(other_host) == ""


def test_readme_links_follow_the_same_rule() -> None:
    html = str(
        render_markdown(
            "[a](javascript:alert(1)) [b](JAVASCRIPT:alert(1)) ![c](data:image/svg+xml,x) [d](vbscript:x) "
            "[e](//evil.example) [ok](https://example.com/docs) [rel](/templates) [top](#usage) [mail](mailto:a@b.c)"
        )
    )
    assert "script:" not in html.lower() and "data:" not in html and "evil.example" not in html
    for kept in ('href="https://example.com/docs"', 'href="/templates"', 'href="#usage"', 'href="mailto:a@b.c"'):
        assert kept in html


def test_app_links_quote_the_names_a_daemon_chose() -> None:
    # Slugs and agent names come from the daemon: none may add a segment, a query or a fragment to the link.
    assert app_path("carol", "w1", "main", "web") == "/@carol/w1.main/apps/web/"
    assert app_path("carol", "w1", "a/../..", "x?y#z") == "/@carol/w1.a%2F..%2F../apps/x%3Fy%23z/"
