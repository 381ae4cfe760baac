"""A dashboard for daily use: a Copy button beside every secret and command it shows, and relative times that are
<time> elements with the exact time on hover (static/slipway.js keeps their text current; see test_browser_csp.py)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from flask import Flask, render_template_string
from flask.testing import FlaskClient

from app.core.templating import duration_element, time_ago_element
from tests.conftest import PASSWORD, Persona
from tests.support.web import post_form, sign_in

pytestmark = pytest.mark.databases("sqlite")

COPY_BUTTON = '<button type="button" class="btn btn-small copy" data-copy aria-label="Copy {what}">Copy</button>'


def copyable(code: str, what: str = "command") -> str:
    """The markup of templates/_copy.html around an inline command."""
    return f'<span class="copyable"><code>{code}</code>{COPY_BUTTON.format(what=what)}</span>'


def access_url(app: Flask) -> str:
    url: str = app.config["SLIPWAY_SETTINGS"].access_url
    return url


def secret_copyable(element_id: str, what: str) -> re.Pattern[str]:
    button = re.escape(COPY_BUTTON.format(what=what))
    return re.compile(
        rf'<span class="copyable copyable-block"><code class="secret" id="{element_id}">([^<]+)</code>{button}</span>'
    )


def test_new_api_token_and_the_login_command_have_copy_buttons(
    app: Flask, client: FlaskClient, personas: dict[str, Persona]
) -> None:
    sign_in(client, "dave@example.com", PASSWORD)
    created = post_form(client, "/account/tokens", {"name": "laptop"}, token_from="/account")
    page = created.get_data(as_text=True)
    shown = secret_copyable("new-token", "token").search(page)
    assert shown is not None
    assert client.get("/api/v2/users/me", headers={"Authorization": f"Bearer {shown[1]}"}).json["username"] == "dave"
    assert copyable(f"slipway login {access_url(app)} --token &lt;token&gt;") in page
    # The Git SSH public key is there to be pasted elsewhere too.
    assert secret_copyable("git-ssh-public-key", "public key").search(page) is not None


def test_new_provisioner_key_and_the_daemon_command_have_copy_buttons(
    app: Flask, client: FlaskClient, personas: dict[str, Persona]
) -> None:
    sign_in(client, "bob@example.com", PASSWORD)
    created = post_form(
        client, "/provisioners/keys", {"name": "eu-pool", "tags": "region=eu"}, token_from="/provisioners"
    )
    page = created.get_data(as_text=True)
    assert secret_copyable("new-key", "key").search(page) is not None
    assert copyable(f"slipway provisionerd start --url {access_url(app)} --key &lt;key&gt;") in page


def test_cli_sign_in_token_has_a_copy_button(client: FlaskClient, personas: dict[str, Persona]) -> None:
    sign_in(client, "carol@example.com", PASSWORD)
    page = post_form(client, "/cli-auth", {}, token_from="/cli-auth").get_data(as_text=True)
    assert secret_copyable("cli-token", "token").search(page) is not None


def test_copied_text_is_escaped_once(app: Flask) -> None:
    source = '{% from "_copy.html" import copyable %}{{ copyable(text) }}'
    with app.test_request_context():
        html = render_template_string(source, text='echo "<b>" & done')
    assert "<code>echo &#34;&lt;b&gt;&#34; &amp; done</code>" in html


def test_relative_times_are_time_elements_with_the_exact_time_on_hover(app: Flask) -> None:
    at = datetime(2026, 11, 26, 23, 56, 2, tzinfo=UTC)
    with app.app_context():
        assert time_ago_element(None) == "never"
        shown = str(time_ago_element(at))
        assert shown.startswith('<time datetime="2026-11-26T23:56:02Z" title="2026-11-26 23:56:02 UTC" data-ago>')
        assert re.search(r">\d+ (day|hour|minute)s? ago</time>$", shown)
        # A duration with an end is fixed; one still running counts up from its start.
        done = str(duration_element(at, at + timedelta(seconds=75)))
        assert done == '<time datetime="PT75S" title="2026-11-26 23:56:02 UTC – 2026-11-26 23:57:17 UTC">1m 15s</time>'
        running = str(duration_element(datetime.now(UTC) - timedelta(seconds=5)))
        assert 'data-since="' in running and re.search(r">[5-9]s</time>$", running)


def test_pages_show_times_as_time_elements(app: Flask, personas: dict[str, Persona]) -> None:
    carol, alice = app.test_client(), app.test_client()
    sign_in(carol, "carol@example.com", PASSWORD)
    sign_in(alice, "alice@example.com", PASSWORD)
    users = alice.get("/users").get_data(as_text=True)
    row = users.split(f'id="user-{personas["carol"].id}"', 1)[1].split("</tr>", 1)[0]
    assert re.search(r'<time datetime="[\dT:-]+Z" title="[\d: -]+ UTC" data-ago>just now</time>', row)
    post_form(alice, "/account/tokens", {"name": "ci"}, token_from="/account")
    account = alice.get("/account").get_data(as_text=True)
    token_row = account.split("<td>ci</td>", 1)[1].split("</tr>", 1)[0]
    assert token_row.count("data-ago>just now</time>") == 1  # created
    assert '<td class="small">never</td>' in token_row  # never used: plain text, nothing to refresh
