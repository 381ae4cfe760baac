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
]


@pytest.mark.parametrize(("source", "address", "expected"), ACCEPTED)
def test_rules_accept_what_coder_accepts(
    workdir: TemplateDir, source: str, address: str, expected: dict[str, str]
) -> None:
    values = resource_values(use(workdir, source).apply(), address)

    assert {key: values[key] for key in expected} == expected
