"""Rules of Coder's own provider that ours now keeps, with its error words (what template authors search for).

One `terraform init` per table: a module-scoped directory is initialised once and every case rewrites main.tf
and plans (or applies) in it. The configurations are ours; the behaviours and wording are the real provider's
(coder/terraform-provider-coder provider/*.go), measured by bench/provider_parity.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.workers.conftest import REQUIRED_PROVIDERS, TemplateDir, resource_values
from workers.terraform import bundled_terraform

AGENT = """
resource "coder_agent" "box" {
  os   = "linux"
  arch = "arm64"
  %s
}
"""


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory, coder_cli_config: Path) -> TemplateDir:
    directory = tmp_path_factory.mktemp("parity")
    (directory / "main.tf").write_text(REQUIRED_PROVIDERS)
    return TemplateDir(bundled_terraform(), directory, coder_cli_config).init()  # the one every install has


def use(workdir: TemplateDir, source: str) -> TemplateDir:
    (workdir.directory / "main.tf").write_text(REQUIRED_PROVIDERS + source)
    (workdir.directory / "terraform.tfstate").unlink(missing_ok=True)
    return workdir


def monitoring(*blocks: str) -> str:
    return AGENT % ("resources_monitoring {\n" + "\n".join(blocks) + "\n}")


def volume(path: str, threshold: int = 80) -> str:
    return f'volume {{\n path = "{path}"\n enabled = true\n threshold = {threshold}\n}}'


def app(body: str) -> str:
    return (
        AGENT % "" + f'resource "coder_app" "web" {{\n  agent_id = coder_agent.box.id\n  slug = "web"\n  {body}\n}}\n'
    )


def parameter(body: str) -> str:
    return f'data "coder_parameter" "size" {{\n  name = "size"\n  type = "string"\n  {body}\n}}\n'


REJECTED = [
    pytest.param(
        app('display_name = "' + "d" * 65 + '"'), "display name is too long (max 64 characters)", id="app-display-name"
    ),
    pytest.param(app('group = "' + "g" * 65 + '"'), "group name is too long (max 64 characters)", id="app-group"),
    pytest.param(app('tooltip = "' + "t" * 2049 + '"'), "tooltip is too long (max 2048 characters)", id="app-tooltip"),
    pytest.param(
        app('share = "world"'),
        'invalid app share "world", must be one of "owner", "authenticated", "public"',
        id="app-share",
    ),
    pytest.param(
        app('open_in = "popup"'),
        'invalid "coder_app" open_in value, must be one of "tab", "slim-window": "popup"',
        id="app-open-in",
    ),
    pytest.param(
        app('url = "http://localhost:8080"').replace('slug = "web"', 'slug = "web--ui"'),
        'invalid "coder_app" slug, must be a valid hostname',
        id="app-slug-double-hyphen",
    ),
    pytest.param(app('icon = "/icon/50%off.svg"'), 'invalid URL escape "%of"', id="app-icon-bad-escape"),
    pytest.param(app('command = "htop"\n  subdomain = true'), '"command": conflicts with subdomain', id="command-sub"),
    pytest.param(app('command = "htop"\n  url = "http://x"'), '"command": conflicts with url', id="command-url"),
    pytest.param(
        app('external = true\n  url = "https://x"\n  share = "public"'),
        '"external": conflicts with share',
        id="external-share",
    ),
    pytest.param(
        app(
            'external = true\n  url = "https://x"\n'
            + '  healthcheck {\n url = "https://x"\n interval = 5\n threshold = 2\n}'
        ),
        '"external": conflicts with healthcheck',
        id="external-healthcheck",
    ),
    pytest.param(
        AGENT % 'api_key_scope = "everything"',
        'expected api_key_scope to be one of ["all" "no_user_data"], got everything',
        id="agent-api-key-scope",
    ),
    pytest.param(
        AGENT % 'auth = "kerberos"',
        'expected auth to be one of ["token" "google-instance-identity" "aws-instance-identity"',
        id="agent-auth",
    ),
    pytest.param(
        AGENT
        % "\n".join(
            f'metadata {{\n key = "cpu"\n display_name = "CPU {n}"\n script = "top"\n interval = 5\n}}' for n in (1, 2)
        ),
        'duplicate agent metadata key "cpu"',
        id="agent-metadata-duplicate-key",
    ),
    pytest.param(
        monitoring("memory {\n enabled = true\n threshold = 150\n}"),
        "expected resources_monitoring.0.memory.0.threshold to be in the range (0 - 100), got 150",
        id="memory-threshold-over-100",
    ),
    pytest.param(
        monitoring(volume("/srv", -5)),
        "expected resources_monitoring.0.volume.0.threshold to be in the range (0 - 100), got -5",
        id="volume-threshold-negative",
    ),
    pytest.param(monitoring(), "resources_monitoring must define at least one monitor", id="monitoring-empty"),
    pytest.param(monitoring(volume("srv/data")), "volume path must be an absolute path", id="volume-relative"),
    pytest.param(monitoring(volume("")), "volume path must not be empty", id="volume-empty"),
    pytest.param(monitoring(volume("/srv"), volume("/srv", 90)), 'duplicate volume path "/srv"', id="volume-duplicate"),
    pytest.param(
        AGENT % "" + 'resource "coder_env" "e" {\n agent_id = coder_agent.box.id\n name = "2FAST"\n value = "x"\n}',
        "invalid value for name (must be a valid environment variable name)",
        id="env-name-starts-with-digit",
    ),
    pytest.param(
        AGENT % "" + 'resource "coder_env" "e" {\n agent_id = coder_agent.box.id\n name = "MY-VAR"\n}',
        "invalid value for name (must be a valid environment variable name)",
        id="env-name-with-dash",
    ),
    pytest.param(
        AGENT % ""
        + 'resource "coder_env" "e" {\n agent_id = coder_agent.box.id\n name = "PATH"\n merge_strategy = "concat"\n}',
        'expected merge_strategy to be one of ["replace" "append" "prepend" "error"], got concat',
        id="env-merge-strategy",
    ),
    pytest.param(
        AGENT % ""
        + 'resource "coder_metadata" "m" {\n resource_id = coder_agent.box.id\n'
        + 'item {\n key = "zone"\n value = "a"\n}\nitem {\n key = "zone"\n value = "b"\n}\n}',
        'duplicate resource metadata key "zone"',
        id="metadata-duplicate-key",
    ),
    pytest.param(parameter('icon = "/emoji/100%zz.png"'), 'invalid URL escape "%zz"', id="parameter-icon-bad-escape"),
    pytest.param(
        parameter('default = "s"\n  option {\n name = "Small"\n value = "s"\n icon = "/icon/%.svg"\n}'),
        'invalid URL escape "%.s"',
        id="option-icon-bad-escape",
    ),
    pytest.param(
        parameter('default = "m"\n  ephemeral = true'),
        "parameter can't be immutable and ephemeral",
        id="parameter-ephemeral-immutable",
    ),
    pytest.param(
        parameter("mutable = true\n  ephemeral = true"),
        "ephemeral parameter requires the default property",
        id="parameter-ephemeral-without-default",
    ),
]


@pytest.mark.parametrize(("source", "words"), REJECTED)
def test_rules_reject_with_coder_words(workdir: TemplateDir, source: str, words: str) -> None:
    assert words in use(workdir, source).plan_error()


ACCEPTED = [
    pytest.param(
        app(
            'display_name = "'
            + "d" * 64
            + '"\n  tooltip = "'
            + "t" * 2048
            + '"\n  external = true\n  url = "https://x"'
        ),
        "coder_app.web",
        {"external": True, "share": "owner"},
        id="app-limits-inclusive",
    ),
    pytest.param(
        AGENT % ""
        + 'resource "coder_agent_instance" "vm" {\n agent_id = coder_agent.box.id\n instance_id = "i-0abc"\n}',
        "coder_agent_instance.vm",
        {"instance_id": "i-0abc"},
        id="agent-instance",
    ),
    pytest.param(
        monitoring("memory {\n enabled = true\n threshold = 100\n}", volume("/"), volume("/home/coder", 0)),
        "coder_agent.box",
        {"os": "linux"},
        id="monitoring-bounds-inclusive",
    ),
    pytest.param(
        AGENT % "" + 'resource "coder_env" "e" {\n agent_id = coder_agent.box.id\n name = "_Go_Path2"\n}',
        "coder_env.e",
        {"name": "_Go_Path2", "merge_strategy": "replace"},
        id="env-name-underscore",
    ),
    pytest.param(
        parameter('icon = "/emoji/100%25.png"\n  default = "a"'),
        "data.coder_parameter.size",
        {"icon": "/emoji/100%25.png"},
        id="icon-good-escape",
    ),
    pytest.param(parameter('default = "a"'), "data.coder_parameter.size", {"styling": "{}"}, id="styling-default"),
]


@pytest.mark.parametrize(("source", "address", "expected"), ACCEPTED)
def test_rules_accept_what_coder_accepts(
    workdir: TemplateDir, source: str, address: str, expected: dict[str, str]
) -> None:
    values = resource_values(use(workdir, source).apply(), address)

    assert {key: values[key] for key in expected} == expected


def test_a_claimed_prebuild_is_not_a_prebuild_even_if_told_so(workdir: TemplateDir) -> None:
    """Coder's guard (TestWorkspace_PrebuildEnv): the claim wins when both flags are set."""
    env = {"CODER_WORKSPACE_IS_PREBUILD": "true", "CODER_WORKSPACE_IS_PREBUILD_CLAIM": "true"}

    values = resource_values(use(workdir, 'data "coder_workspace" "me" {}').apply(env), "data.coder_workspace.me")

    assert (values["is_prebuild"], values["prebuild_count"], values["is_prebuild_claim"]) == (False, 0, True)


# Coder's form-type matrix, as its documentation tabulates it: for each type, with options and without, the forms
# it takes, the one it gets when none is written first. Every other pairing (and `error`, which no parameter may
# ask for) is refused. Written out here, not read from protocol/parameters.py, so that the two are checked
# against each other.
ACCEPTED_FORMS = {
    ("string", True): ["radio", "dropdown"],
    ("string", False): ["input", "textarea"],
    ("number", True): ["radio", "dropdown"],
    ("number", False): ["input", "slider"],
    ("bool", True): ["radio", "dropdown"],
    ("bool", False): ["checkbox", "switch"],
    ("list(string)", True): ["radio", "multi-select"],
    ("list(string)", False): ["tag-select"],
}
EVERY_FORM = [
    "", "radio", "slider", "input", "dropdown", "checkbox", "switch", "multi-select", "tag-select", "textarea", "error"
]  # fmt: skip


def form_type_parameter(kind: str, with_options: bool, form: str) -> tuple[str, str]:
    """A parameter of ``kind`` asking for ``form`` ("" for none), with two options or none: its name and HCL."""
    name = f"{kind.replace('(', '-').replace(')', '')}-{'options' if with_options else 'plain'}-{form or 'default'}"
    values = {"string": ('"a"', '"b"'), "number": ("1", "2"), "bool": ('"true"', '"false"')}.get(kind)
    if kind == "list(string)":  # a multi-select's options are its items; a radio's are whole lists
        values = ('"red"', '"blue"') if form == "multi-select" else ('jsonencode(["red"])', 'jsonencode(["blue"])')
    default = {"string": '"a"', "number": "1", "bool": '"true"', "list(string)": 'jsonencode(["red"])'}[kind]
    options = "".join(f'\n  option {{\n    name = "o{index}"\n    value = {value}\n  }}' for index, value in
                      enumerate(values or ()) if with_options)  # fmt: skip
    form_line = f'\n  form_type = "{form}"' if form else ""
    body = f'name = "{name}"\n  type = "{kind}"\n  default = {default}{form_line}{options}'
    return name, f'data "coder_parameter" "{name}" {{\n  {body}\n}}\n'


def test_form_types_follow_coders_matrix_with_the_default_first(workdir: TemplateDir) -> None:
    accepted = [
        (form_type_parameter(kind, with_options, form), forms[0] if form == "" else form)
        for (kind, with_options), forms in ACCEPTED_FORMS.items()
        for form in ["", *forms]
    ]
    plan = use(workdir, "".join(source for (_, source), _ in accepted)).plan()
    computed = {name: resource_values(plan, f"data.coder_parameter.{name}")["form_type"] for (name, _), _ in accepted}
    assert computed == {name: expected for (name, _), expected in accepted}


def test_every_other_form_type_is_refused_naming_the_forms_allowed(workdir: TemplateDir) -> None:
    refused = [
        (kind, with_options, form)
        for (kind, with_options), forms in ACCEPTED_FORMS.items()
        for form in EVERY_FORM
        if form and form not in forms
    ]
    assert len(refused) == 65  # 88 pairings of 4 types, options or not, and 11 forms, less the 23 accepted
    output = use(workdir, "".join(form_type_parameter(*case)[1] for case in refused)).plan_error()
    for kind, with_options, form in refused:
        allowed = ACCEPTED_FORMS[(kind, with_options)]
        when = ""
        if form in ACCEPTED_FORMS[(kind, not with_options)]:  # right for the type, wrong for having options or not
            when = " when options exist" if with_options else " when options do not exist"
        words = f'"form_type" attribute="{form}" is not supported for "type"="{kind}"{when}'
        assert f"{words}, choose one of [{' '.join(allowed)}]" in output, (kind, with_options, form)
