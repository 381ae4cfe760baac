"""A template's parameter ``regex`` runs on RE2, in time linear in the value, and values have a size cap (issue 34,
M1): the common slug rule took Python's backtracking ``re`` 11-19 s on 28 characters and stalled the web worker."""

from __future__ import annotations

from typing import Any

import pytest
from flask.testing import FlaskClient

from protocol.parameters import MAX_VALUE_BYTES, ParameterError, RichParameter, check_declaration, check_value
from tests.conftest import Persona
from tests.support.daemon import PARAMETERS, FakeDaemon, import_template, push_version

pytestmark = pytest.mark.databases("sqlite")

SLUG = r"^[a-z0-9]+([._-]?[a-z0-9]+)*$"
# What Python's re accepts and RE2 (like Go's regexp, which Coder uses) cannot express.
INEXPRESSIBLE = [r"^(a+)\1$", r"^(?=.*[0-9]).+$", r"^(?!admin).+$", r"(?<=x)y"]


def _slug_parameter(**changes: Any) -> RichParameter:
    fields = {"name": "slug", "validation_regex": SLUG, "validation_error": "Use a slug, not {value}."}
    return RichParameter(**{**fields, **changes})


# Python's re needs seconds for 28 characters and never finishes on the long ones: the timeout is the assertion.
@pytest.mark.timeout(60)
@pytest.mark.parametrize("length", [27, 1_000, MAX_VALUE_BYTES - 1])
def test_the_slug_rule_refuses_a_near_miss_in_linear_time(length: int) -> None:
    with pytest.raises(ParameterError, match="Use a slug"):
        check_value(_slug_parameter(), "a" * length + "!", None)
    check_value(_slug_parameter(), "a" * length, None)


def test_regexes_follow_go_semantics_not_pythons() -> None:
    # Python's "$" also matches before a final newline; Go's (and RE2's) only at the end.
    with pytest.raises(ParameterError):
        check_value(_slug_parameter(), "abc\n", None)
    # Python's \d takes any script's digits; Go's only ASCII.
    with pytest.raises(ParameterError):
        check_value(_slug_parameter(validation_regex=r"^\d+$"), "١٢", None)


@pytest.mark.parametrize("pattern", INEXPRESSIBLE)
def test_a_pattern_re2_cannot_express_is_refused_at_declaration(pattern: str) -> None:
    with pytest.raises(ParameterError, match="RE2 syntax") as refused:
        check_declaration(_slug_parameter(validation_regex=pattern), check_default=False)
    assert refused.value.summary == "Invalid validation block"
    assert "no backreferences, lookahead or lookbehind" in str(refused.value)


def test_a_too_long_pattern_is_refused() -> None:
    with pytest.raises(ParameterError, match="at most 4096"):
        check_declaration(_slug_parameter(validation_regex="a" * 5000), check_default=False)


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("a" * (MAX_VALUE_BYTES + 1), f"at most {MAX_VALUE_BYTES} bytes"),
        ("é" * (MAX_VALUE_BYTES // 2 + 1), "bytes"),  # counted in UTF-8, as the environment carries it
        ("a\x00b", "NUL"),
        ("a\ud800b", "lone surrogate"),
    ],
)
def test_values_that_no_environment_variable_can_carry_are_refused(value: str, words: str) -> None:
    plain = RichParameter(name="note")
    with pytest.raises(ParameterError, match=words):
        check_value(plain, value, None)


@pytest.mark.parametrize("digits", [20, 5_000, 100_000])
def test_a_huge_whole_number_is_refused_not_crashed_on(digits: int) -> None:
    """Python's int() refuses more than 4,300 digits with a ValueError of its own; Go's Atoi takes int64 only."""
    size = RichParameter(name="size", type="number", validation_min=1, validation_max=8)
    with pytest.raises(ParameterError):
        check_value(size, "9" * digits, None)
    monotonic = RichParameter(name="size", type="number", validation_monotonic="increasing")
    check_value(monotonic, "3", "9" * digits)  # an unreadable previous value is ignored, as Coder does


def _slug_template(client: FlaskClient, personas: dict[str, Persona]) -> dict[str, Any]:
    slug = {"name": "slug", "type": "string", "required": True, "validation_regex": SLUG,
            "validation_error": "Use a slug.", "options": []}  # fmt: skip
    return import_template(client, personas, FakeDaemon(client), parameters=[*PARAMETERS, slug])


@pytest.mark.timeout(60)
def test_a_workspace_create_refuses_a_near_miss_of_the_slug_rule_at_once(
    client: FlaskClient, personas: dict[str, Persona]
) -> None:
    template = _slug_template(client, personas)
    for value in ("a" * 27 + "!", "a" * 60_000 + "!"):
        body = {
            "template_id": template["id"],
            "name": "w",
            "rich_parameter_values": [{"name": "region", "value": "eu"}, {"name": "slug", "value": value}],
        }
        reply = client.post("/api/v2/workspaces", json=body, headers=personas["carol"].auth)
        assert reply.status_code == 400, reply.json
        assert reply.json["validations"][0]["field"] == "slug"
        assert "Use a slug." in reply.json["validations"][0]["detail"]


@pytest.mark.parametrize("pattern", INEXPRESSIBLE[:2])
def test_an_import_declaring_a_pattern_re2_cannot_express_fails_saying_why(
    client: FlaskClient, personas: dict[str, Persona], pattern: str
) -> None:
    """A daemon of an older release may not check it: the server refuses it again at the import's completion."""
    bob, daemon = personas["bob"], FakeDaemon(client)
    version = push_version(client, bob)
    job_id = version["job"]["id"]
    assert daemon.call(f"/jobs/{job_id}/acquire").status_code == 200
    parameter = {"name": "slug", "type": "string", "validation_regex": pattern, "validation_error": "bad"}
    result = {"parameters": [parameter], "resources": {"start": [], "stop": []}}
    assert daemon.call(f"/jobs/{job_id}/complete", {"template_import": result}).status_code == 204
    job = client.get(f"/api/v2/templateversions/{version['id']}", headers=bob.auth).json["job"]
    assert job["status"] == "failed"
    assert "Parameter 'slug'" in job["error"] and "RE2 syntax" in job["error"]
