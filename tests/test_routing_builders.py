"""URL builders compiled on first use (app/core/routing.py) build what Werkzeug's own rules build, for every route."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest
from flask import Flask
from werkzeug.routing import Map, Rule

from app.core.config import Settings
from app.core.routing import LazyBuilderRule

pytestmark = pytest.mark.databases("sqlite")

# A value each converter accepts, for the variable parts of the app's routes.
SAMPLES = {"default": "x-1", "int": 7, "path": "a/b c", "uuid": uuid.UUID(int=5), "any": None}


def _values(rule: Rule) -> dict[str, object]:
    values: dict[str, object] = {}
    for name in rule.arguments - set(rule.defaults or {}):
        converter = rule._converters[name]  # which converter, to pick a value it takes
        kind = next(key for key, cls in Map.default_converters.items() if isinstance(converter, cls))
        values[name] = SAMPLES[kind]
    return values


def test_every_route_builds_the_url_werkzeugs_own_rules_build(app: Flask) -> None:
    lazy = [rule for rule in app.url_map.iter_rules() if isinstance(rule, LazyBuilderRule)]
    assert len(lazy) > 200, "the app's routes are made with LazyBuilderRule"
    eager = Map(
        [Rule(rule.rule, websocket=rule.websocket, **rule.get_empty_kwargs()) for rule in lazy],
        converters=app.url_map.converters,
        strict_slashes=app.url_map.strict_slashes,
        merge_slashes=app.url_map.merge_slashes,
    ).bind("localhost")
    built = app.url_map.bind("localhost")
    for rule in lazy:
        values = _values(rule)
        for extra in ({}, {"next": "/x?y=1", "page": 2}):  # unknown values go to the query string
            expected = eager.build(rule.endpoint, {**values, **extra}, method=sorted(rule.methods or {"GET"})[0])
            got = built.build(rule.endpoint, {**values, **extra}, method=sorted(rule.methods or {"GET"})[0])
            assert got == expected, rule.rule
    with app.test_request_context():
        assert app.url_for("auth.login", next="/w") == eager.build("auth.login", {"next": "/w"})


def test_rules_parsed_once_per_process_match_as_werkzeugs_own_and_keep_their_apps_converters(
    app: Flask, app_factory: Callable[[Settings], Flask]
) -> None:
    """The second app of a process takes every rule's parts from the first one's parsing: the same regular
    expressions, trace, arguments and converter kinds as Werkzeug's own parsing, with converters of its own map;
    and its URL map matches and builds as the first one's does."""
    second = app_factory(app.config["SLIPWAY_SETTINGS"])
    eager = Map(
        [Rule(rule.rule, websocket=rule.websocket, **rule.get_empty_kwargs()) for rule in second.url_map.iter_rules()],
        converters=second.url_map.converters,
        strict_slashes=second.url_map.strict_slashes,
        merge_slashes=second.url_map.merge_slashes,
    )
    expected = {(rule.rule, tuple(sorted(rule.methods or ()))): rule for rule in eager.iter_rules()}
    for rule in second.url_map.iter_rules():
        own = expected[(rule.rule, tuple(sorted(rule.methods or ())))]
        assert (rule._parts, rule._trace, rule.arguments) == (own._parts, own._trace, own.arguments), rule.rule
        assert {name: type(c) for name, c in rule._converters.items()} == {
            name: type(c) for name, c in own._converters.items()
        }
        assert all(converter.map is second.url_map for converter in rule._converters.values()), rule.rule
    first_urls, second_urls = app.url_map.bind("localhost"), second.url_map.bind("localhost")
    for path in ("/workspaces", f"/workspaces/{uuid.UUID(int=9)}", "/api/v2/users/me", "/static/slipway.css"):
        assert second_urls.match(path) == first_urls.match(path), path
