"""Git providers' configuration: numbered environment variables as Coder takes them, a YAML or TOML file, the
defaults each type brings, and one clear line naming the entry for every mistake (also from `slipway server`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.core.config import SettingsError, load_settings
from app.core.external_auth_config import ExternalAuthConfigError, load_external_auth
from tests.support.server import run_server_once


def test_a_github_entry_needs_only_an_id_a_client_id_and_a_secret(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("s3cret\n")
    env = {
        "SLIPWAY_EXTERNAL_AUTH_0_ID": "github",
        "SLIPWAY_EXTERNAL_AUTH_0_CLIENT_ID": "Iv1.abc",
        "SLIPWAY_EXTERNAL_AUTH_0_CLIENT_SECRET_FILE": str(secret),
        "SLIPWAY_EXTERNAL_AUTH_1_ID": "work",
        "SLIPWAY_EXTERNAL_AUTH_1_TYPE": "gitlab",
        "SLIPWAY_EXTERNAL_AUTH_1_CLIENT_ID": "x",
        "SLIPWAY_EXTERNAL_AUTH_1_AUTH_URL": "https://gitlab.example.com/oauth/authorize",
        "SLIPWAY_EXTERNAL_AUTH_1_TOKEN_URL": "https://gitlab.example.com/oauth/token",
        "SLIPWAY_EXTERNAL_AUTH_1_REGEX": r"^https://gitlab\.example\.com/",
        "SLIPWAY_EXTERNAL_AUTH_1_SCOPES": "read_repository write_repository",
        "SLIPWAY_EXTERNAL_AUTH_1_DEVICE_FLOW": "false",
    }
    (github, work), secret_files = load_external_auth(env)
    assert (github.type, github.client_secret, github.display_name) == ("github", "s3cret", "GitHub")
    assert github.validate_url == "https://api.github.com/user" and github.git_username == "x-access-token"
    assert github.matches("https://github.com") and github.matches("https://github.com/org/repo.git")
    assert not github.matches("https://gitlab.com/org/repo") and not github.matches("https://github.com.evil.test/")
    assert secret_files == (secret.absolute(),)
    assert work.type == "gitlab" and work.scopes == ("read_repository", "write_repository")
    assert work.matches("https://gitlab.example.com/group/repo") and not work.matches("https://gitlab.com/x")
    assert work.revoke_url == "https://gitlab.com/oauth/revoke"  # the type's default where none is given


@pytest.mark.parametrize(
    ("kind", "regex_host", "validate"),
    [
        ("gitlab", "gitlab.com", "https://gitlab.com/oauth/token/info"),
        ("gitea", "gitea.com", "https://gitea.com/login/oauth/userinfo"),
        ("bitbucket-cloud", "bitbucket.org", "https://api.bitbucket.org/2.0/user"),
        ("bitbucket", "bitbucket.org", "https://api.bitbucket.org/2.0/user"),
        ("azure-devops", "dev.azure.com", ""),
    ],
)
def test_each_type_brings_its_endpoints_and_the_urls_it_serves(kind: str, regex_host: str, validate: str) -> None:
    env = {
        "SLIPWAY_EXTERNAL_AUTH_0_ID": "p",
        "SLIPWAY_EXTERNAL_AUTH_0_TYPE": kind,
        "SLIPWAY_EXTERNAL_AUTH_0_CLIENT_ID": "c",
    }
    (provider,), _ = load_external_auth(env)
    assert provider.matches(f"https://{regex_host}/team/repo.git") and provider.validate_url == validate
    assert provider.auth_url.startswith("https://") and provider.token_url.startswith("https://")


def test_providers_from_yaml_and_toml_files(tmp_path: Path) -> None:
    yaml_file = tmp_path / "git.yaml"
    yaml_file.write_text(
        "external_auth:\n"
        "  - id: gh\n    type: github\n    client_id: a\n    client_secret: b\n    device_flow: true\n"
        "  - id: corp\n    type: oauth2\n    client_id: c\n    auth_url: https://sso.corp.test/auth\n"
        "    token_url: https://sso.corp.test/token\n    scopes: [repo, openid]\n    no_refresh: true\n"
    )
    (gh, corp), _ = load_external_auth({"SLIPWAY_EXTERNAL_AUTH_CONFIG": str(yaml_file)})
    assert gh.device_flow and gh.device_code_url == "https://github.com/login/device/code"
    assert corp.scopes == ("repo", "openid") and corp.no_refresh and corp.matches("https://sso.corp.test/x/y.git")
    toml_file = tmp_path / "git.toml"
    toml_file.write_text('[[external_auth]]\nid = "gl"\ntype = "gitlab"\nclient_id = "x"\n')
    (gl,), _ = load_external_auth({"SLIPWAY_EXTERNAL_AUTH_CONFIG": str(toml_file)})
    assert gl.type == "gitlab"
    settings = load_settings({"SLIPWAY_EXTERNAL_AUTH_CONFIG": str(toml_file), "SLIPWAY_DATA_DIR": str(tmp_path)})
    assert [provider.id for provider in settings.external_auth] == ["gl"]


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"ID": "gh", "TYPE": "svn", "CLIENT_ID": "x"}, "SLIPWAY_EXTERNAL_AUTH_0 (gh): type must be one of"),
        ({"ID": "gh", "TYPE": "github"}, "SLIPWAY_EXTERNAL_AUTH_0 (gh): client_id is required"),
        ({"ID": "gh", "TYPE": "", "CLIENT_ID": "x"}, "(gh): type is required (github, gitlab"),
        ({"TYPE": "github", "CLIENT_ID": "x"}, "SLIPWAY_EXTERNAL_AUTH_0: id is required"),
        ({"ID": "a b", "TYPE": "github", "CLIENT_ID": "x"}, "id must be letters"),
        ({"ID": "corp", "TYPE": "oauth2", "CLIENT_ID": "x"}, "(corp): auth_url is required for type oauth2"),
        ({"ID": "gh", "CLIENT_ID": "x", "REGEX": "("}, "(gh): regex does not compile"),
        ({"ID": "gh", "CLIENT_ID": "x", "AUTH_URL": "javascript:alert(1)"}, "(gh): auth_url must be an http(s) URL"),
        ({"ID": "gh", "CLIENT_ID": "x", "DEVICE_FLOW": "maybe"}, "(gh): device_flow must be true or false"),
        ({"ID": "gh", "CLIENT_ID": "x", "CLIENT_SECRET": "a", "CLIENT_SECRET_FILE": "/x"}, "set only one of"),
        ({"ID": "gh", "CLIENT_ID": "x", "CLIENT_SECRET_FILE": "/nonexistent/s"}, "cannot read /nonexistent/s"),
        ({"ID": "gh", "CLIENT_ID": "x", "COLOUR": "blue"}, "(gh): unknown field 'colour'"),
        (
            {"ID": "gl", "TYPE": "azure-devops", "CLIENT_ID": "x", "DEVICE_FLOW": "true"},
            "device_flow needs device_code_url",
        ),
    ],
)
def test_every_mistake_is_one_line_naming_the_entry(env: dict[str, str], expected: str) -> None:
    with pytest.raises(ExternalAuthConfigError) as caught:
        load_external_auth(
            {f"SLIPWAY_EXTERNAL_AUTH_0_{key}": value for key, value in {"TYPE": "github", **env}.items()}
        )
    assert expected in str(caught.value) and "\n" not in str(caught.value)


def test_duplicate_ids_and_unreadable_files_are_refused(tmp_path: Path) -> None:
    env = {
        f"SLIPWAY_EXTERNAL_AUTH_{n}_{key}": value
        for n in (0, 1)
        for key, value in (("ID", "gh"), ("TYPE", "github"), ("CLIENT_ID", "x"))
    }
    with pytest.raises(ExternalAuthConfigError, match="SLIPWAY_EXTERNAL_AUTH_1: id 'gh' is used by another provider"):
        load_external_auth(env)
    bad = tmp_path / "bad.yaml"
    bad.write_text("external_auth: [unclosed\n")
    with pytest.raises(ExternalAuthConfigError, match="does not parse"):
        load_external_auth({"SLIPWAY_EXTERNAL_AUTH_CONFIG": str(bad)})
    bad.write_text("providers: []\n")
    with pytest.raises(ExternalAuthConfigError, match="must hold a list of providers under 'external_auth'"):
        load_external_auth({"SLIPWAY_EXTERNAL_AUTH_CONFIG": str(bad)})
    with pytest.raises(ExternalAuthConfigError, match="cannot read it"):
        load_external_auth({"SLIPWAY_EXTERNAL_AUTH_CONFIG": str(tmp_path / "missing.yaml")})


def test_the_encryption_keys_go_by_coder_s_name_too(tmp_path: Path) -> None:
    key = "bmJubm5ubm5ubm5ubm5ubm5ubm5ubm5ubm5ubm5ubm4="
    settings = load_settings({"SLIPWAY_EXTERNAL_TOKEN_ENCRYPTION_KEYS": key, "SLIPWAY_DATA_DIR": str(tmp_path)})
    assert len(settings.encryption_keys) == 1
    with pytest.raises(SettingsError, match="set only one of SLIPWAY_ENCRYPTION_KEYS and"):
        load_settings({"SLIPWAY_EXTERNAL_TOKEN_ENCRYPTION_KEYS": key, "SLIPWAY_ENCRYPTION_KEYS": key})


def test_the_server_stops_at_start_with_one_line_naming_the_bad_entry(tmp_path: Path) -> None:
    config = tmp_path / "git.yaml"
    config.write_text("external_auth:\n  - id: gh\n    type: github\n  - id: gl\n    type: gitlab\n    client_id: x\n")
    result = run_server_once("--data-dir", str(tmp_path / "data"), "--external-auth-config", str(config))
    assert result.returncode != 0
    assert result.stderr.strip().count("\n") == 0, result.stderr
    assert f"{config} entry 0 (gh): client_id is required" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout
