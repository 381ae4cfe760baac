"""What other features add to a template's page (the workspaces feature adds its Workspaces card), wired by
``create_app``: the catalog sits below the workspaces in the server's layers, so it renders each section without
knowing what the sections are."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from flask import Flask, current_app
from markupsafe import Markup

from app.catalog.models import Template
from app.users.models import User

EXTENSION_KEY = "slipway_template_sections"

# A section's HTML for this template as this person may see it.
TemplateSection = Callable[[Template, User], Markup]


def init_app(app: Flask, sections: Sequence[TemplateSection]) -> None:
    app.extensions[EXTENSION_KEY] = tuple(sections)


def template_sections(template: Template, viewer: User) -> list[Markup]:
    sections: tuple[TemplateSection, ...] = current_app.extensions.get(EXTENSION_KEY, ())
    return [render(template, viewer) for render in sections]
