"""No route answers 5xx to bad input (issue 34, L2): every route that takes a JSON body or a form, fed wrong types,
huge and non-finite numbers, long strings, NUL characters, lone surrogates and deep nesting, by Hypothesis.

Each route gets a body its view would accept (where one is needed to reach the checks behind the first field) with
one to three fields replaced, drawn from the names its view reads and from every protocol message it decodes. The
run is deterministic (``derandomize``) and bounded: a fixed number of examples per route, on SQLite, in one world
(a template, a running workspace, a daemon holding a build) made once. The inputs that found the five 500s of the
audit come first, as explicit examples.
"""

from __future__ import annotations

import dataclasses
import inspect
import itertools
import json
import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from protocol.codec import Message
from tests.conftest import PASSWORD, Persona
from tests.support.daemon import FakeDaemon, held_first_build, import_template
from tests.support.web import sign_in
from tests.test_route_guards import ADMIN_ONLY_ENDPOINTS, OWNER_ONLY_ENDPOINTS, ROUTES

pytestmark = pytest.mark.databases("sqlite")

EXAMPLES_PER_ROUTE = 10
ZERO_ID = "00000000-0000-0000-0000-000000000000"
# Not fuzzed: app proxies answer 502 when no agent serves the app (by design); the daemon's long poll holds a
# minute; signing out, ending sessions and changing the password would end the session the other routes use.
SKIPPED = {
    "apps.app_root", "apps.serve_app", "provisionerd_api.wait", "auth.logout", "auth.logout_everywhere",
    "users_api.logout", "users.end_session", "users.change_password",
}  # fmt: skip
MUTATING = {"POST", "PUT", "PATCH", "DELETE"}

# The inputs that found the audit's 500s (issue 34, L2), tried first on their routes.
FOUND = {
    "lifecycle_api.set_ttl": [{"ttl_ms": 10**20}],
    "workspaces_api.create_workspace": [{"ttl_ms": 10**20}, {"rich_parameter_values": [
        {"name": "region", "value": "eu"}, {"name": "size", "value": "9" * 5000}]}],
    "lifecycle_api.extend": [{"deadline": "9999-12-31T23:59:59-23:59"}],
    "lifecycle.extend": [{"hours": "1e12"}, {"hours": "inf"}, {"hours": "-inf"}, {"hours": "1e300"}],
    "lifecycle.schedule": [{"ttl_hours": "inf"}, {"ttl_hours": "1e300"}],
    "usersecrets_api.create_secret": [{"value": "a\ud800b"}, {"description": "\ud800"}, {"value": "a\x00b"}],
    "provisionerd_api.complete": [{}, {"workspace_build": {"resources": [
        {"name": "dev", "type": "terraform_data", "agents": [{"name": "main", "connection_timeout": "abc"}]}]}}],
}  # fmt: skip

NUMBERS = [10**20, -(10**20), 2**63, 2**64, -(2**63) - 1, 10**300, 1e20, 1e300, -1e300, 1.5, -1, 0, 5e-324]
TEXTS = [
    "", " ", "\x00", "a\x00b", "\ud800", "a\udfffb", "x" * 70_000, "inf", "-inf", "nan", "1e300", "1e12", "9" * 5000,
    "-1", "9999-12-31T23:59:59-23:59", "0001-01-01T00:00:00+23:59", "../../etc/passwd", "<script>x</script>",
    "١٢", "²", "true", "null", "{}", "[]", "%00", "\r\nX: y", "me", ZERO_ID,
]  # fmt: skip
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.sampled_from(NUMBERS),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(TEXTS),
    st.text(max_size=40),
)
JSON_VALUES = st.recursive(
    SCALARS,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=12), children, max_size=3),
    max_leaves=8,
)
# A form field is text; a lone surrogate cannot be sent as UTF-8 (a browser never sends one).
FORM_TEXTS = st.one_of(
    st.sampled_from([text for text in TEXTS if not re.search("[\ud800-\udfff]", text)]),
    st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=40),
)
DEEP = "[" * 5000 + "]" * 5000


def _world(client: FlaskClient, personas: dict[str, Persona]) -> dict[str, str]:
    """Real ids for the routes' path arguments: carol's running workspace, a build a daemon holds, a secret."""
    daemon = FakeDaemon(client)
    template = import_template(client, personas, daemon)
    running = held_first_build(client, personas, daemon, template, name="running")
    job_id = running["latest_build"]["job"]["id"]
    assert daemon.call(f"/jobs/{job_id}/complete", {"workspace_build": {"resources": []}}).status_code == 204
    held = held_first_build(client, personas, daemon, template, name="held")
    secret = {"name": "token", "value": "s3cret-value", "env_name": "TOKEN"}
    assert client.post("/api/v2/users/me/secrets", json=secret, headers=personas["carol"].auth).status_code == 201
    return {
        "workspace_id": running["id"],
        "build_id": running["latest_build"]["id"],
        "template_id": template["id"],
        "version_id": template["active_version_id"],
        "job_id": held["latest_build"]["job"]["id"],
        "name": "token",
        "user": "me",
        "user_id": personas["dave"].id,
        "daemon_id": daemon.id,
    }


def _path(rule: str, world: dict[str, str], endpoint: str) -> str:
    for argument in re.findall(r"<(?:[a-z]+:)?([a-z_]+)>", rule):
        value = world.get(argument, ZERO_ID)
        if argument == "name" and endpoint.startswith(("catalog.", "lifecycle.")):
            value = "dev"  # a template's name
        rule = re.sub(rf"<(?:[a-z]+:)?{argument}>", value, rule)
    return rule


def _fields(view: Callable[..., Any]) -> list[str]:
    """The field names a view reads: its string literals that look like one, and the fields of every protocol
    message it decodes (``message_body(JobCompletion)``)."""
    source = inspect.getsource(view)
    names = set(re.findall(r"""["']([a-z][a-z0-9_]{1,40})["']""", source))
    module = inspect.getmodule(view)
    for message_name in re.findall(r"message_body\((\w+)\)", source):
        message = getattr(module, message_name, None)
        if isinstance(message, type) and issubclass(message, Message):
            names |= {field.name for field in dataclasses.fields(message)}
    return sorted(names) or ["name"]


BASELINES: dict[str, dict[str, Any]] = {
    "workspaces_api.create_workspace": {"template_id": "{template_id}", "name": "fuzz{n}",
                                        "rich_parameter_values": [{"name": "region", "value": "eu"}]},
    "workspaces.new": {"template_id": "{template_id}", "name": "fuzz{n}", "param.region": "eu"},
    "usersecrets_api.create_secret": {"name": "fuzzed{n}", "value": "s3cret-value", "env_name": "FUZZ{n}"},
    "users.create_secret": {"name": "fuzzed{n}", "value": "s3cret-value", "env_name": "FUZZ{n}"},
    "lifecycle.schedule": {"start_time": "09:30", "day": "mon", "zone": "UTC", "ttl_hours": "8", "cron": ""},
    "lifecycle.extend": {"hours": "1"},
    "provisionerd_api.complete": {"workspace_build": {"resources": []}},
}  # fmt: skip


def _baseline(endpoint: str, world: dict[str, str]) -> dict[str, Any]:
    text = json.dumps(BASELINES.get(endpoint, {}))
    for key, value in world.items():  # "{n}" stays, for Target.send
        text = text.replace("{" + key + "}", value)
    loaded: dict[str, Any] = json.loads(text)
    return loaded


@dataclasses.dataclass(frozen=True)
class Target:
    """A route as called: an API route with a JSON body and credential headers, a page with a form and a session."""

    client: FlaskClient
    method: str
    path: str
    headers: dict[str, str]
    numbers: Iterator[int] = dataclasses.field(default_factory=itertools.count)

    def __str__(self) -> str:
        return f"{self.method} {self.path}"

    def send(self, body: dict[str, Any] | str) -> int:
        if isinstance(body, dict):  # a new name each time: a name taken by the last example is only a 409
            body = json.loads(json.dumps(body).replace("{n}", str(next(self.numbers))))
        if self.path.startswith("/api/"):
            data = body if isinstance(body, str) else json.dumps(body)
            return self.client.open(self.path, method=self.method, data=data, headers=self.headers).status_code
        form = {key: value if isinstance(value, str) else json.dumps(value) for key, value in dict(body).items()}
        return self.client.open(self.path, method=self.method, data=form).status_code


def _checker(
    target: Target,
    fields: list[str],
    baseline: dict[str, Any],
    values: st.SearchStrategy[Any],
) -> Callable[..., None]:
    """One route's property: whatever one to three of its fields hold, the answer is not a 5xx."""
    bodies = st.dictionaries(st.sampled_from(fields), values, min_size=1, max_size=3).map(
        lambda changes: {**baseline, **changes}
    )

    @settings(
        max_examples=EXAMPLES_PER_ROUTE,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(body=bodies)
    def check(body: dict[str, Any]) -> None:
        status = target.send(body)
        assert status < 500, f"{target} answered {status} to {body!r:.300}"

    return check


def test_no_route_answers_5xx_to_bad_input(app: Flask, client: FlaskClient, personas: dict[str, Persona]) -> None:
    app.config["WTF_CSRF_ENABLED"] = False  # the checks behind CSRF are what is fuzzed
    world = _world(client, personas)
    pages = {who: app.test_client() for who in ("alice", "carol")}
    for who, page_client in pages.items():
        sign_in(page_client, f"{who}@example.com", PASSWORD)
    daemon_headers = {"Slipway-Provisioner-PSK": "test-daemon-psk", "Slipway-Provisioner-Daemon": world["daemon_id"]}
    rules = {rule.endpoint: rule.rule for rule in app.url_map.iter_rules()}
    failures: list[str] = []
    tried = 0
    # The routes with recorded inputs first, while the workspace still runs (later routes may stop or delete it).
    for endpoint, method, _ in sorted(ROUTES, key=lambda route: route[0] not in FOUND):
        if method not in MUTATING or endpoint in SKIPPED:
            continue
        path = _path(rules[endpoint], world, endpoint)
        who = "alice" if endpoint in OWNER_ONLY_ENDPOINTS | ADMIN_ONLY_ENDPOINTS else "carol"
        api = path.startswith("/api/")
        headers = daemon_headers if endpoint.startswith("provisionerd_api.") else personas[who].auth
        baseline = _baseline(endpoint, world)
        fields = sorted({*_fields(app.view_functions[endpoint]), *baseline})

        target = Target(client if api else pages[who], method, path, headers if api else {})
        check = _checker(target, fields, baseline, JSON_VALUES if api else FORM_TEXTS)
        for found in FOUND.get(endpoint, []):
            check = example(body={**baseline, **found})(check)
        try:
            check()
            if api:  # nesting deeper than any message, as a whole body
                assert target.send(DEEP) < 500, f"{target}: deep nesting"
        except AssertionError as exc:
            failures.append(str(exc).splitlines()[0])
        tried += 1
    assert tried > 80, "the route table lost its routes"
    assert not failures, "\n".join(failures)
