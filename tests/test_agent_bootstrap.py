"""Init scripts and the agent bundle, as the server serves them (no sign-in: neither holds a secret)."""

from __future__ import annotations

import base64
import hashlib
import io
import shutil
import subprocess
import sys
import tarfile
from importlib.metadata import version
from pathlib import Path

import pytest
from flask import Flask
from flask.testing import FlaskClient

from app.agents.bootstrap import SUPPORTED, agent_scripts, render_init_script
from app.agents.bundles import agent_source_files
from app.core.config import load_settings
from app.factory import create_app
from cli.server import SERVER_FLAGS
from tests.conftest import make_settings
from tests.support.agent_bundle import native_platform, native_wheelhouse
from workers.coder_provider.agent import init_script as provider_init_script
from workers.terraform.environment import terraform_environment

PLATFORMS = [(os_name, arch) for os_name, arches in SUPPORTED.items() for arch in arches]
ACCESS_URL = "https://dev.example.com:8443/slipway"
PLACEHOLDERS = ("${ACCESS_URL}", "${AUTH_TYPE}", "${OS}", "${ARCH}")


def _app(data_dir: Path, wheelhouse: Path) -> Flask:
    # Public routes touch neither the database nor Redis.
    settings = make_settings(
        data_dir, "sqlite://", "unix:///nonexistent", access_url=ACCESS_URL, agent_wheelhouse=str(wheelhouse)
    )
    return create_app(settings)


@pytest.fixture
def client(tmp_path: Path) -> FlaskClient:
    return _app(tmp_path, tmp_path / "no-wheels").test_client()


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return native_wheelhouse(tmp_path_factory)


@pytest.fixture
def bundle_client(tmp_path: Path, wheelhouse: Path) -> FlaskClient:
    return _app(tmp_path, wheelhouse).test_client()


def _digest_header(body: bytes) -> str:
    return f"sha-256=:{base64.b64encode(hashlib.sha256(body).digest()).decode()}:"


@pytest.mark.parametrize(("os_name", "arch"), PLATFORMS)
def test_init_script_is_filled_in_for_every_platform(client: FlaskClient, os_name: str, arch: str) -> None:
    response = client.get(f"/api/v2/init-script/{os_name}/{arch}")
    assert response.status_code == 200
    assert response.mimetype == "text/plain"
    assert response.headers["Content-Digest"] == _digest_header(response.data)
    script = response.text
    assert f"'{ACCESS_URL}/'" in script and "'token'" in script and f"'{os_name}-{arch}'" in script
    assert not [placeholder for placeholder in PLACEHOLDERS if placeholder in script]
    if os_name != "windows":
        for shell in ("sh", "bash"):
            checked = subprocess.run([shell, "-n"], input=script, capture_output=True, text=True, check=False)
            assert checked.returncode == 0, f"{shell}: {checked.stderr}"


@pytest.mark.parametrize("path", ["windows/armv7", "darwin/armv7", "plan9/amd64", "linux/x86_64"])
def test_unknown_platform_is_a_json_400(client: FlaskClient, path: str) -> None:
    response = client.get(f"/api/v2/init-script/{path}")
    assert response.status_code == 400
    assert "No agent init script for" in response.json["message"]


def test_both_routes_are_public(client: FlaskClient) -> None:
    endpoints = {rule.endpoint: rule.rule for rule in client.application.url_map.iter_rules()}
    assert endpoints["agent_bootstrap.init_script"] == "/api/v2/init-script/<os_name>/<arch>"
    assert endpoints["agent_bootstrap.agent_bundle"] == "/bin/slipway-agent-<platform>.tar.gz"
    # Anonymous, no token: an answer, not a redirect to the login page or a 401.
    assert client.get("/api/v2/init-script/linux/amd64").status_code == 200
    assert client.get("/bin/slipway-agent-linux-amd64.tar.gz").status_code == 404


def test_missing_wheels_answer_404_saying_how_to_build_them(client: FlaskClient) -> None:
    response = client.get("/bin/slipway-agent-linux-arm64.tar.gz")
    assert response.status_code == 404 and response.mimetype == "text/plain"
    assert "slipway agent-bundle --platform linux-arm64" in response.text and "make agent-bundle" in response.text
    unknown = client.get("/bin/slipway-agent-plan9-amd64.tar.gz")
    assert unknown.status_code == 404 and unknown.mimetype == "text/plain"


def test_build_scripts_leave_the_url_to_the_provider(monkeypatch: pytest.MonkeyPatch) -> None:
    scripts = agent_scripts()
    assert sorted(scripts) == sorted(f"{os_name}_{arch}" for os_name, arch in PLATFORMS)
    for name, script in scripts.items():
        assert "${ACCESS_URL}" in script and "${AUTH_TYPE}" in script, name
        assert "${ARCH}" not in script and "${OS}" not in script, name
    # What the Terraform provider makes of the build's script is what the server serves.
    for os_name, arch in PLATFORMS:
        monkeypatch.setenv(f"CODER_AGENT_SCRIPT_{os_name}_{arch}", scripts[f"{os_name}_{arch}"])
        assert provider_init_script(os_name, arch, ACCESS_URL + "/", "token") == render_init_script(
            os_name, arch, ACCESS_URL
        )


def test_a_quote_in_the_access_url_cannot_end_the_shell_string() -> None:
    script = render_init_script("linux", "amd64", "http://example.com/it's")
    assert "access_url='http://example.com/it%27s/'" in script


def test_terraform_gets_the_daemon_interpreter_but_no_other_slipway_variable(tmp_path: Path) -> None:
    env = terraform_environment(
        {"PATH": "/usr/bin", "SLIPWAY_SECRET_KEY": "secret", "SLIPWAY_AGENT_PYTHON": "/elsewhere/python"},
        {},
        plugin_cache=tmp_path / "plugins",
    )
    assert env["SLIPWAY_AGENT_PYTHON"] == sys.executable
    assert "SLIPWAY_SECRET_KEY" not in env


def _members(body: bytes) -> list[tuple[tarfile.TarInfo, bytes]]:
    with tarfile.open(fileobj=io.BytesIO(body), mode="r:gz") as archive:
        return [(member, archive.extractfile(member).read()) for member in archive]


def test_bundle_holds_the_wheels_and_the_agent_with_checksums(bundle_client: FlaskClient, wheelhouse: Path) -> None:
    platform = native_platform()
    with bundle_client.get(f"/bin/slipway-agent-{platform}.tar.gz") as response:
        assert response.status_code == 200 and response.mimetype == "application/gzip"
        body = response.data
    sha256 = hashlib.sha256(body).hexdigest()
    assert response.headers["ETag"] == f'"{sha256}"'
    assert response.headers["Content-Digest"] == _digest_header(body)

    members = _members(body)
    names = [member.name for member, _ in members]
    assert names[0] == "slipway-agent/SHA256SUMS"
    assert all(member.isfile() and member.name.startswith("slipway-agent/") for member, _ in members)
    sums = dict(reversed(line.split("  ", 1)) for line in members[0][1].decode().splitlines())
    contents = {member.name.removeprefix("slipway-agent/"): data for member, data in members[1:]}
    assert sums == {name: hashlib.sha256(data).hexdigest() for name, data in contents.items()}

    wheels = {name.removeprefix("wheels/") for name in contents if name.startswith("wheels/")}
    assert wheels == {wheel.name for wheel in (wheelhouse / platform).glob("*.whl")}
    for python in ("311", "312", "313"):
        assert any(name.startswith("cffi-") and f"-cp{python}-" in name for name in wheels), python
    pins = {f"{name}=={version(name)}" for name in ("asyncssh", "websockets", "httpx")}
    assert set(contents["requirements.txt"].decode().split()) == pins
    assert contents["python-versions.txt"].decode().split() == ["3.11", "3.12", "3.13"]
    agent_files = dict(agent_source_files())
    assert "agent/__main__.py" in contents and not any("__pycache__" in name for name in contents)
    # The agent, and the protocol package it shares with the server.
    assert {name for name in contents if name.startswith(("agent/", "protocol/"))} == {*agent_files, "agent/VERSION"}
    assert "protocol/codec.py" in agent_files
    assert contents["agent/__main__.py"] == agent_files["agent/__main__.py"].read_bytes()
    assert contents["agent/VERSION"].decode() == version("slipway")  # the agent reports the server's version


def test_bundle_is_cached_deterministic_and_revalidated(bundle_client: FlaskClient, tmp_path: Path) -> None:
    url = f"/bin/slipway-agent-{native_platform()}.tar.gz"
    with bundle_client.get(url) as first:
        etag, body = first.headers["ETag"], first.data
    assert len(list((tmp_path / "agent-bundles").glob("*.tar.gz"))) == 1
    with bundle_client.get(url, headers={"If-None-Match": etag}) as unchanged:
        assert unchanged.status_code == 304 and not unchanged.data
    # Built again from scratch, the same inputs give the same bytes (one ETag across replicas).
    shutil.rmtree(tmp_path / "agent-bundles")
    with bundle_client.get(url) as again:
        assert again.headers["ETag"] == etag and again.data == body


def test_wheelhouse_setting_defaults_beside_the_installation(tmp_path: Path) -> None:
    assert load_settings({}).agent_wheelhouse == Path(sys.prefix) / "share" / "slipway" / "agent-wheels"
    assert load_settings({"SLIPWAY_AGENT_WHEELHOUSE": str(tmp_path)}).agent_wheelhouse == tmp_path
    assert ("--agent-wheelhouse", "SLIPWAY_AGENT_WHEELHOUSE") in {flag[:2] for flag in SERVER_FLAGS}
