"""Appearance (issue 41 part 6): Coder's GET/PUT /api/v2/appearance, its validation and guards, the banners, name,
logo and support links on every page signed in or not, the banners' stylesheet, and the header's inbox count."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from flask import Flask
from flask.testing import FlaskClient

from app.appearance.services import text_color
from app.core.columns import rfc3339, utcnow
from app.core.extensions import db
from app.notifications.models import Notification
from tests.conftest import PASSWORD, Persona
from tests.support.web import post_form, sign_in

# JSON columns are stored differently by each database.
pytestmark = pytest.mark.databases("sqlite", "postgresql")

SETTINGS = {
    "application_name": "Acme Cloud",
    "logo_url": "/static/favicon.svg",
    "docs_url": "https://docs.example.com",
    "service_banner": {"enabled": True, "message": "Maintenance tonight at 22:00", "background_color": "#FFCC00"},
    "announcement_banners": [
        {"enabled": True, "message": "Now open", "background_color": "#004852"},
        {"enabled": True, "message": "Not yet", "background_color": "#123456",
         "starts_at": rfc3339(utcnow() + timedelta(days=1))},
        {"enabled": True, "message": "Long gone", "background_color": "#123456",
         "ends_at": rfc3339(utcnow() - timedelta(days=1))},
        {"enabled": False, "message": "Switched off", "background_color": "#123456"},
    ],
    "support_links": [{"name": "Help desk", "target": "mailto:help@example.com", "icon": "chat"}],
}  # fmt: skip


def test_owners_change_the_appearance_everyone_reads_it(client: FlaskClient, personas: dict[str, Persona]) -> None:
    unset = client.get("/api/v2/appearance")  # no token: the sign-in page needs it too, as in Coder
    assert unset.status_code == 200
    assert unset.json == {
        "application_name": "",
        "logo_url": "",
        "docs_url": "",
        "service_banner": {"enabled": False, "message": "", "background_color": "#004852"},
        "announcement_banners": [],
        "support_links": [],
    }
    refused = client.put("/api/v2/appearance", json=SETTINGS, headers=personas["carol"].auth)
    assert refused.status_code == 403
    assert client.put("/api/v2/appearance", json=SETTINGS).status_code == 401
    saved = client.put("/api/v2/appearance", json=SETTINGS, headers=personas["alice"].auth)
    assert saved.status_code == 200, saved.json
    read = client.get("/api/v2/appearance", headers=personas["carol"].auth).json
    assert read == saved.json
    assert read["service_banner"]["background_color"] == "#ffcc00"
    assert read["announcement_banners"][0] == {
        "enabled": True, "message": "Now open", "background_color": "#004852", "starts_at": None, "ends_at": None,
    }  # fmt: skip
    assert read["announcement_banners"][1]["starts_at"] == SETTINGS["announcement_banners"][1]["starts_at"]  # type: ignore[index]


BAD_SETTINGS: list[tuple[dict[str, object], str]] = [
    ({"service_banner": {"enabled": True, "message": "x", "background_color": "red"}},
     "service_banner.background_color"),
    ({"service_banner": {"enabled": True, "message": ""}}, "service_banner.message"),
    ({"service_banner": {"enabled": True, "message": "x" * 1001}}, "service_banner.message"),
    ({"logo_url": "javascript:alert(1)"}, "logo_url"),
    ({"logo_url": "//evil.example/logo.png"}, "logo_url"),
    ({"docs_url": "/relative"}, "docs_url"),
    ({"support_links": [{"name": "x", "target": "javascript:alert(1)"}]}, "support_links[0].target"),
    ({"support_links": [{"name": "x", "target": "data:text/html,hi"}]}, "support_links[0].target"),
    ({"support_links": [{"name": "", "target": "https://help.example.com"}]}, "support_links[0].name"),
    ({"support_links": [{"name": "x", "target": "https://h.example.com"}] * 11}, "support_links"),
    ({"announcement_banners": [{"message": "x"}] * 11}, "announcement_banners"),
    ({"announcement_banners": [{"message": "x", "starts_at": "tomorrow"}]}, "announcement_banners[0].starts_at"),
    ({"announcement_banners": [{"message": "x", "starts_at": "2026-12-02T00:00:00Z",
                                    "ends_at": "2026-12-01T00:00:00Z"}]}, "announcement_banners[0].ends_at"),
    ({"announcement_banners": "none"}, "announcement_banners"),
    ({"application_name": "A\nB"}, "application_name"),
    ({"application_name": 7}, "application_name"),
    ({"theme": "dark"}, "theme"),
]  # fmt: skip


def test_bad_settings_are_refused_by_field(client: FlaskClient, personas: dict[str, Persona]) -> None:
    for body, field in BAD_SETTINGS:
        response = client.put("/api/v2/appearance", json=body, headers=personas["alice"].auth)
        assert response.status_code == 400, (body, response.json)
        assert field in [item["field"] for item in response.json["validations"]], (body, response.json)
    assert client.get("/api/v2/appearance").json["application_name"] == ""  # nothing was saved


def test_a_body_that_is_not_an_object_is_refused(client: FlaskClient, personas: dict[str, Persona]) -> None:
    response = client.put("/api/v2/appearance", data="[1]", headers=personas["alice"].auth)
    assert response.status_code == 400
    assert "JSON object" in response.json["message"]


def test_every_page_shows_the_banners_in_their_window_name_logo_and_links(
    app: Flask, client: FlaskClient, personas: dict[str, Persona]
) -> None:
    assert client.put("/api/v2/appearance", json=SETTINGS, headers=personas["alice"].auth).status_code == 200
    signed_out = client.get("/login").get_data(as_text=True)
    assert "Maintenance tonight at 22:00" in signed_out and "Now open" in signed_out
    assert "<title>Sign in · Acme Cloud</title>" in signed_out and "Sign in to Acme Cloud" in signed_out

    sign_in(client, personas["carol"].email, PASSWORD)
    page = client.get("/workspaces").get_data(as_text=True)
    banners = re.findall(r'<p class="site-banner (site-banner-[\w-]+)">([^<]*)</p>', page)
    # The service banner, then the one announcement inside its window (not the future, past or disabled ones).
    assert banners == [
        ("site-banner-service", "Maintenance tonight at 22:00"),
        ("site-banner-announcement-0", "Now open"),
    ]
    assert "· Acme Cloud</title>" in page and '<img src="/static/favicon.svg"' in page
    assert '<a href="mailto:help@example.com" rel="noopener">Help desk</a>' in page
    assert '<a href="https://docs.example.com">Docs</a>' in page
    assert "/deployment/appearance" not in page  # the settings link is an owner's

    # The colours come from a stylesheet (the policy allows no inline style), with text that contrasts.
    href = re.search(r'<link rel="stylesheet" href="(/appearance.css\?v=\d+)">', page)
    assert href is not None
    sheet = app.test_client().get(href.group(1))  # public, like the banners on the sign-in page
    assert sheet.status_code == 200 and sheet.mimetype == "text/css"
    assert "max-age" in sheet.headers["Cache-Control"]
    css = sheet.get_data(as_text=True)
    assert ".site-banner-service{background-color:#ffcc00;color:#000000}" in css
    assert ".site-banner-announcement-0{background-color:#004852;color:#ffffff}" in css


def test_text_on_any_banner_colour_passes_contrast() -> None:
    def luminance(color: str) -> float:
        def channel(pair: str) -> float:
            value = int(pair, 16) / 255
            return value / 12.92 if value <= 0.04045 else ((value + 0.055) / 1.055) ** 2.4

        r, g, b = (channel(color[i : i + 2]) for i in (1, 3, 5))
        return 0.2126 * r + 0.7152 * g + 0.0722 * b

    for value in range(0, 256, 5):
        for background in (f"#{value:02x}{value:02x}{value:02x}", f"#{value:02x}0000", f"#00{value:02x}00",
                           f"#0000{value:02x}", f"#{value:02x}{255 - value:02x}80"):  # fmt: skip
            lighter, darker = sorted((luminance(background), luminance(text_color(background))), reverse=True)
            assert (lighter + 0.05) / (darker + 0.05) >= 4.5, background


def test_the_owners_form_saves_and_keeps_a_refused_edit(
    app: Flask, client: FlaskClient, personas: dict[str, Persona]
) -> None:
    member = app.test_client()
    sign_in(member, personas["carol"].email, PASSWORD)
    assert member.get("/deployment/appearance").status_code == 403
    sign_in(client, personas["alice"].email, PASSWORD)
    form = {
        "application_name": "Acme",
        "service_enabled": "on", "service_message": "Read-only until noon", "service_color": "#7a1f1f",
        "announcement-0-enabled": "on", "announcement-0-message": "Welcome", "announcement-0-color": "#004852",
        "announcement-0-starts_at": "2026-01-01T09:00", "announcement-0-ends_at": "",
        "link-0-name": "Wiki", "link-0-target": "https://wiki.example.com", "link-0-icon": "docs",
    }  # fmt: skip
    saved = post_form(client, "/deployment/appearance", form)
    assert saved.status_code == 302
    config = client.get("/api/v2/appearance").json
    assert config["service_banner"] == {
        "enabled": True,
        "message": "Read-only until noon",
        "background_color": "#7a1f1f",
    }
    assert config["announcement_banners"][0]["starts_at"] == "2026-01-01T09:00:00Z"
    assert config["support_links"] == [{"name": "Wiki", "target": "https://wiki.example.com", "icon": "docs"}]
    page = client.get("/deployment/appearance").get_data(as_text=True)
    assert 'value="2026-01-01T09:00"' in page and "Read-only until noon" in page

    refused = post_form(client, "/deployment/appearance", {**form, "link-0-target": "javascript:alert(1)"})
    assert refused.status_code == 400
    text = refused.get_data(as_text=True)
    assert "support_links[0].target" in text and 'value="javascript:alert(1)"' in text
    assert client.get("/api/v2/appearance").json["support_links"][0]["target"] == "https://wiki.example.com"
    no_token = client.post("/deployment/appearance", data=form)
    assert no_token.status_code == 400  # CSRF


def test_the_header_counts_unread_inbox_messages(app: Flask, client: FlaskClient, personas: dict[str, Persona]) -> None:
    sign_in(client, personas["carol"].email, PASSWORD)
    assert 'aria-label="Inbox, none unread"' in client.get("/workspaces").get_data(as_text=True)
    with app.app_context():
        for number in range(3):
            db.session.add(Notification(user_id=personas["carol"].id, event="test", title=f"message {number}"))
        db.session.add(Notification(user_id=personas["carol"].id, event="test", title="old", read_at=utcnow()))
        db.session.add(Notification(user_id=personas["dave"].id, event="test", title="dave's"))
        db.session.commit()
    page = client.get("/workspaces").get_data(as_text=True)
    assert 'href="/account#inbox" class="inbox-link" id="inbox-link" aria-label="Inbox, 3 unread"' in page
    assert '<span class="badge badge-count" aria-hidden="true">3</span>' in page
