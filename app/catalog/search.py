"""Coder's template filter (``?q=``): ``name:go deprecated:false exact_name:docker``, a bare word matching a
template's name or display name; and the orders the templates list can be read in (``?sort=``). Shared by the API
and the Templates page.
"""

from __future__ import annotations

from sqlalchemy import Select, func, or_

from app.catalog.models import Template
from app.catalog.services import templates_query
from app.core.filters import Orders, ordered, parse_terms, true_or_false
from app.users.models import User

_EXAMPLES = {"name": "docker", "exact_name": "docker", "deprecated": "true"}
# ?sort= → the columns; "-" reads it the other way (the newest first).
SORTS: Orders = {
    "name": (Template.name, Template.id),
    "-name": (Template.name.desc(), Template.id),
    "created": (Template.created_at, Template.id),
    "-created": (Template.created_at.desc(), Template.id),
    "updated": (Template.updated_at, Template.id),
    "-updated": (Template.updated_at.desc(), Template.id),
}


def listed_templates(viewer: User, text: str = "", sort: str = "", *, name: str | None = None) -> Select[Template]:
    """Every template ``viewer`` may use (or the one called ``name``) the filter ``text`` lets through, in the order
    ``sort`` names (by name when blank): the API's list and the page's. A term it cannot read is a 400 that says
    what it takes."""
    return ordered(searched_templates(templates_query(viewer, name), text), sort, SORTS, "name")


def searched_templates(query: Select[Template], text: str) -> Select[Template]:
    """``query`` (of templates) narrowed by the filter ``text`` says; all of it when ``text`` is blank."""
    if not text.strip():
        return query
    terms = parse_terms(text, _EXAMPLES)
    exact = terms.get("exact_name")
    if exact is not None:
        query = query.where(func.lower(Template.name) == exact.lower())
    part = terms.get("name", "").lower()
    if part:
        in_name = func.lower(Template.name).contains(part, autoescape=True)
        query = query.where(or_(in_name, func.lower(Template.display_name).contains(part, autoescape=True)))
    deprecated = true_or_false(terms, "deprecated")
    if deprecated is not None:
        has_message = Template.deprecation_message != ""
        query = query.where(has_message if deprecated else ~has_message)
    return query
