"""Reading, validating and saving the appearance, and what a page shows of it now.

Everything here ends up in every page (and the sign-in page), so it is validated strictly when it is saved: colours
are ``#rrggbb`` (they go into a generated stylesheet, never into a page's markup), links are http(s) or mailto (no
``javascript:``), the logo is http(s) or a path on this server, and counts and lengths are bounded.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from flask import g
from sqlalchemy import func, select
from sqlalchemy.exc import SQLAlchemyError

from app.appearance.models import SINGLETON_ID, Appearance
from app.core.columns import parse_rfc3339, rfc3339, utcnow
from app.core.extensions import db
from app.core.safe_urls import safe_url
from app.core.validation import FieldErrors, text_problem
from app.notifications.models import Notification
from protocol.codec import JSON, JsonObject

log = logging.getLogger(__name__)

DEFAULT_NAME = "Slipway"
# Coder's default banner colour: white text on it passes WCAG AA.
DEFAULT_COLOR = "#004852"
COLOR = re.compile(r"^#[0-9a-fA-F]{6}$")
MAX_NAME = 64
MAX_URL = 512
MAX_MESSAGE = 1000
MAX_BANNERS = 10
MAX_LINKS = 10
MAX_LINK_NAME = 64
# Coder's built-in support-link icons; anything else must be an image URL.
ICONS = frozenset({"", "bug", "chat", "docs", "star"})
FIELDS = frozenset(
    {"application_name", "logo_url", "docs_url", "service_banner", "announcement_banners", "support_links"}
)
BANNER_FIELDS = frozenset({"enabled", "message", "background_color", "starts_at", "ends_at"})
LINK_FIELDS = frozenset({"name", "target", "icon"})


def _row() -> Appearance | None:
    return db.session.get(Appearance, SINGLETON_ID)


def config() -> JsonObject:
    """Coder's AppearanceConfig (plus ``starts_at``/``ends_at`` on announcement banners), defaults when unset."""
    row = _row()
    if row is None:
        return {
            "application_name": "",
            "logo_url": "",
            "docs_url": "",
            "service_banner": {"enabled": False, "message": "", "background_color": DEFAULT_COLOR},
            "announcement_banners": [],
            "support_links": [],
        }
    return {
        "application_name": row.application_name,
        "logo_url": row.logo_url,
        "docs_url": row.docs_url,
        "service_banner": dict(row.service_banner),
        "announcement_banners": [dict(banner) for banner in row.announcement_banners],
        "support_links": [dict(link) for link in row.support_links],
    }


def update(body: Mapping[str, JSON]) -> JsonObject:
    """Replace the appearance with ``body`` (fields left out take their defaults, as Coder's PUT does)."""
    clean = validate(body)
    row = _row()
    if row is None:
        row = Appearance(id=SINGLETON_ID)
        db.session.add(row)
    row.application_name = str(clean["application_name"])
    row.logo_url = str(clean["logo_url"])
    row.docs_url = str(clean["docs_url"])
    row.service_banner = _object(clean["service_banner"])
    row.announcement_banners = [_object(banner) for banner in _list(clean["announcement_banners"])]
    row.support_links = [_object(link) for link in _list(clean["support_links"])]
    db.session.commit()
    return config()


def validate(body: Mapping[str, JSON]) -> JsonObject:
    errors = FieldErrors()
    for unknown in sorted(set(body) - FIELDS):
        errors.add(unknown, "Not an appearance setting.")
    name = _text(body, "application_name", errors, MAX_NAME)
    logo = _url(body, "logo_url", errors, allow_path=True)
    docs = _url(body, "docs_url", errors, allow_path=False)
    service = body.get("service_banner", {})
    if not isinstance(service, dict):
        errors.add("service_banner", "Must be an object.")
        service = {}
    clean_service = _banner(service, "service_banner", errors, window=False)
    banners = _items(body, "announcement_banners", errors, MAX_BANNERS)
    clean_banners = [
        _banner(banner, f"announcement_banners[{index}]", errors, window=True) for index, banner in enumerate(banners)
    ]
    links = _items(body, "support_links", errors, MAX_LINKS)
    clean_links = [_link(link, f"support_links[{index}]", errors) for index, link in enumerate(links)]
    errors.raise_if_any("The appearance settings are invalid.")
    return {
        "application_name": name,
        "logo_url": logo,
        "docs_url": docs,
        "service_banner": clean_service,
        "announcement_banners": list(clean_banners),
        "support_links": list(clean_links),
    }


def _text(body: Mapping[str, JSON], name: str, errors: FieldErrors, limit: int) -> str:
    value = body.get(name, "")
    if not isinstance(value, str):
        errors.add(name, "Must be a string.")
        return ""
    value = value.strip()
    problem = text_problem(value)
    if problem:
        errors.add(name, problem)
    elif len(value) > limit:
        errors.add(name, f"Use at most {limit} characters.")
    elif "\n" in value and limit <= MAX_NAME:
        errors.add(name, "Must be one line.")
    return value


def _url(body: Mapping[str, JSON], name: str, errors: FieldErrors, *, allow_path: bool) -> str:
    value = _text(body, name, errors, MAX_URL)
    if value and not safe_url(value, allow_path=allow_path):
        where = "an http(s) URL or a path on this server (/…)" if allow_path else "an http(s) URL"
        errors.add(name, f"Must be {where}.")
    return value


def _items(body: Mapping[str, JSON], name: str, errors: FieldErrors, limit: int) -> list[JsonObject]:
    value = body.get(name, [])
    if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
        errors.add(name, "Must be a list of objects.")
        return []
    if len(value) > limit:
        errors.add(name, f"Use at most {limit}.")
        return []
    return [item for item in value if isinstance(item, dict)]


def _banner(banner: JsonObject, where: str, errors: FieldErrors, *, window: bool) -> JsonObject:
    allowed = BANNER_FIELDS if window else BANNER_FIELDS - {"starts_at", "ends_at"}
    for unknown in sorted(set(banner) - allowed):
        errors.add(f"{where}.{unknown}", "Not a banner setting.")
    enabled = banner.get("enabled", False)
    if not isinstance(enabled, bool):
        errors.add(f"{where}.enabled", "Must be true or false.")
        enabled = False
    message = _text(banner, "message", _Prefixed(errors, where), MAX_MESSAGE)
    if enabled and not message:
        errors.add(f"{where}.message", "A banner that is shown needs a message.")
    color = banner.get("background_color", DEFAULT_COLOR) or DEFAULT_COLOR
    if not isinstance(color, str) or not COLOR.match(color):
        errors.add(f"{where}.background_color", "Must be a colour as #rrggbb.")
        color = DEFAULT_COLOR
    clean: JsonObject = {"enabled": enabled, "message": message, "background_color": color.lower()}
    if window:
        starts = _time(banner, "starts_at", where, errors)
        ends = _time(banner, "ends_at", where, errors)
        if starts and ends and ends <= starts:
            errors.add(f"{where}.ends_at", "Must be after starts_at.")
        clean["starts_at"] = rfc3339(starts)
        clean["ends_at"] = rfc3339(ends)
    return clean


def _time(banner: JsonObject, name: str, where: str, errors: FieldErrors) -> datetime | None:
    value = banner.get(name)
    if value is None or value == "":
        return None
    parsed = parse_rfc3339(value) if isinstance(value, str) else None
    if parsed is None:
        errors.add(f"{where}.{name}", "Must be an RFC 3339 time, e.g. 2026-12-01T09:00:00Z.")
    return parsed


def _link(link: JsonObject, where: str, errors: FieldErrors) -> JsonObject:
    for unknown in sorted(set(link) - LINK_FIELDS):
        errors.add(f"{where}.{unknown}", "Not a support link setting.")
    prefixed = _Prefixed(errors, where)
    name = _text(link, "name", prefixed, MAX_LINK_NAME)
    if not name:
        errors.add(f"{where}.name", "A support link needs a name.")
    target = _text(link, "target", prefixed, MAX_URL)
    # mailto: is for support addresses; anything else (javascript:, data:) could run in the dashboard's origin.
    if not (target.lower().startswith("mailto:") and len(target) > 7) and not safe_url(target):
        errors.add(f"{where}.target", "Must be an http(s) URL or a mailto: address.")
    icon = _text(link, "icon", prefixed, MAX_URL)
    if icon not in ICONS and not safe_url(icon, allow_path=True):
        errors.add(f"{where}.icon", "Must be one of bug, chat, docs, star, or an image URL.")
    return {"name": name, "target": target, "icon": icon}


class _Prefixed(FieldErrors):
    """Field names of a nested object, reported as ``outer.field``."""

    def __init__(self, errors: FieldErrors, prefix: str) -> None:
        self.items = errors.items
        self.prefix = prefix

    def add(self, field: str, detail: str) -> None:
        self.items.append({"field": f"{self.prefix}.{field}", "detail": detail})


def _object(value: JSON) -> JsonObject:
    return value if isinstance(value, dict) else {}


def _list(value: JSON) -> list[JSON]:
    return value if isinstance(value, list) else []


@dataclass(frozen=True)
class Banner:
    css_class: str
    message: str


@dataclass(frozen=True)
class Shown:
    """What a page shows: read once per request (one primary-key lookup)."""

    application_name: str
    logo_url: str
    docs_url: str
    banners: tuple[Banner, ...]
    support_links: tuple[JsonObject, ...]
    version: str


def shown() -> Shown:
    cached: Shown | None = g.get("appearance_shown")
    if cached is not None:
        return cached
    try:
        row = _row()
    except SQLAlchemyError:
        # The page is an error page about the database itself (down, or this request's transaction failed): it
        # is shown with the defaults rather than failing in its turn.
        log.warning("the appearance could not be read; showing the defaults", exc_info=True)
        return Shown(DEFAULT_NAME, "", "", (), (), "0")
    if row is None:
        result = Shown(DEFAULT_NAME, "", "", (), (), "0")
    else:
        banners: list[Banner] = []
        if row.service_banner.get("enabled"):
            banners.append(Banner("site-banner-service", str(row.service_banner.get("message", ""))))
        now = utcnow()
        for index, banner in enumerate(row.announcement_banners):
            if banner.get("enabled") and _in_window(banner, now):
                banners.append(Banner(f"site-banner-announcement-{index}", str(banner.get("message", ""))))
        result = Shown(
            row.application_name or DEFAULT_NAME,
            row.logo_url,
            row.docs_url,
            tuple(banners),
            tuple(row.support_links),
            str(int(row.updated_at.timestamp() * 1000)),
        )
    g.appearance_shown = result
    return result


def _in_window(banner: JsonObject, now: datetime) -> bool:
    starts = parse_rfc3339(str(banner["starts_at"])) if banner.get("starts_at") else None
    ends = parse_rfc3339(str(banner["ends_at"])) if banner.get("ends_at") else None
    return (starts is None or starts <= now) and (ends is None or now < ends)


def stylesheet() -> str:
    """The banners' colours as classes: the Content-Security-Policy forbids inline styles, so the colours live in
    this stylesheet (served from 'self'). The text is black or white, whichever contrasts more with the background:
    for any colour that is at least 4.58:1, so it passes WCAG AA."""
    row = _row()
    if row is None:
        return ""
    rules = []
    if row.service_banner:
        rules.append(_rule("site-banner-service", str(row.service_banner.get("background_color", DEFAULT_COLOR))))
    for index, banner in enumerate(row.announcement_banners):
        rules.append(_rule(f"site-banner-announcement-{index}", str(banner.get("background_color", DEFAULT_COLOR))))
    return "".join(rules)


def _rule(css_class: str, color: str) -> str:
    if not COLOR.match(color):  # stored values were validated; this keeps a hand-edited row out of the CSS
        color = DEFAULT_COLOR
    return f".{css_class}{{background-color:{color};color:{text_color(color)}}}\n"


def text_color(background: str) -> str:
    luminance = _luminance(background)
    return "#000000" if (luminance + 0.05) / 0.05 >= 1.05 / (luminance + 0.05) else "#ffffff"


def _luminance(color: str) -> float:
    def channel(hex_pair: str) -> float:
        value = int(hex_pair, 16) / 255
        return value / 12.92 if value <= 0.04045 else ((value + 0.055) / 1.055) ** 2.4

    r, g_, b = (channel(color[i : i + 2]) for i in (1, 3, 5))
    return 0.2126 * r + 0.7152 * g_ + 0.0722 * b


def inbox_unread(user_id: str) -> int:
    """The header's unread count: one COUNT over the person's rows of ix_notifications_user_id_created_at."""
    query = select(func.count()).where(Notification.user_id == user_id, Notification.read_at.is_(None))
    try:
        return int(db.session.scalar(query) or 0)
    except SQLAlchemyError:  # as in shown(): an error page about the database itself
        log.warning("the inbox could not be counted", exc_info=True)
        return 0
