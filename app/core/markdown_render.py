"""Template READMEs rendered to HTML without giving their authors a way to run script in a viewer's browser."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import markdown
from markdown.treeprocessors import Treeprocessor
from markupsafe import Markup

from app.core.safe_urls import safe_url


def _is_safe_link(value: str) -> bool:
    """http(s), a path on this server, an anchor on the page, or an email address (the one rule of app.core.safe_urls,
    plus what a README's own links need)."""
    return bool(safe_url(value, allow_path=True)) or value.startswith("#") or value.lower().startswith("mailto:")


class _DropUnsafeLinks(Treeprocessor):
    def run(self, root: ET.Element) -> None:
        for element in root.iter():
            for attribute in ("href", "src"):
                value = element.get(attribute)
                if value is not None and not _is_safe_link(value):
                    element.set(attribute, "#")


def render_markdown(text: str) -> Markup:
    converter = markdown.Markdown(extensions=["fenced_code", "tables"])
    # Raw HTML in the source is shown as text, never passed through.
    converter.preprocessors.deregister("html_block")
    converter.inlinePatterns.deregister("html")
    converter.treeprocessors.register(_DropUnsafeLinks(converter), "drop_unsafe_links", 0)
    return Markup(converter.convert(text))  # noqa: S704 - escaped above: raw HTML is disabled, links are filtered
