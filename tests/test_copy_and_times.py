"""A dashboard for daily use: a Copy button beside every secret and command it shows."""

from __future__ import annotations

import re

from flask import Flask, render_template_string
from flask.testing import FlaskClient

from tests.conftest import PASSWORD, Persona
from tests.support.web import post_form, sign_in

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
