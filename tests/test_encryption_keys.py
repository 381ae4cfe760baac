"""Keys that encrypted the database's secrets: the start-up check, status and rotation (in-process on SQLite and
PostgreSQL), and the README's rotation procedure with real `slipway server` processes and the CLI."""

from __future__ import annotations

import base64
import os
import subprocess
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import httpx
import pytest
from flask import Flask
from sqlalchemy import select

from app.catalog.models import TemplateVersion
from app.core.config import Settings
from app.core.crypto import EncryptionKey, current_keyring, derive_key
from app.core.encryption_keys import EncryptionKeyRecord, KeyProblem, check_keys, encryption_status, rotate
from app.core.extensions import db
from app.resources.models import WorkspaceAgent
from app.workspaces.models import WorkspaceBuild
from protocol.provisionerd import NameValue
from tests.conftest import Persona
from tests.support.archives import tar_of
from tests.support.secret_flow import ENV_SECRET, SENSITIVE_VALUE, STATE, run_the_flow
from tests.support.server import SLIPWAY, ServerProcess, run_server_once

pytestmark = pytest.mark.databases("sqlite", "postgresql")

OLD, NEW = os.urandom(32), os.urandom(32)
OLD_ID, NEW_ID = EncryptionKey(OLD).key_id, EncryptionKey(NEW).key_id


def b64(*keys: bytes) -> str:
    return ",".join(base64.b64encode(key).decode() for key in keys)


def with_keys(app_factory: Callable[[Settings], Flask], settings: Settings, *keys: bytes, **changes: str) -> Flask:
    return app_factory(replace(settings, encryption_keys=keys, **changes))  # type: ignore[arg-type]


def start_checked(app: Flask) -> None:
    """What `slipway server` does before it serves."""
    with app.app_context():
        check_keys(current_keyring())


def version_resources(app: Flask) -> str:
    """The API path of the imported version's resources (its agents' definitions are encrypted)."""
    with app.app_context():
        version_id = db.session.scalars(select(TemplateVersion.id)).one()
    return f"/api/v2/templateversions/{version_id}/resources"


class Interrupted(Exception):
    pass


def test_rotation_moves_every_secret_to_the_first_key_even_when_interrupted(
    app: Flask, personas: dict[str, Persona], app_factory: Callable[[Settings], Flask], settings: Settings
) -> None:
    # Zero setup: the key derived from the secret key encrypts.
    start_checked(app)
    run_the_flow(app, personas)
    derived_id = EncryptionKey(derive_key(settings.secret_key)).key_id
    with app.app_context():
        before = encryption_status(current_keyring())
    assert before.values_on(derived_id) == 5 and set(before.values) == {
        # Found by their column type: Git provider tokens, SSH keys, people's secrets and saved plans rotate
        # with everything else.
        "external_auth_links.access_token",
        "external_auth_links.refresh_token",
        "external_auth_links.token_extra",
        "git_ssh_keys.private_key",
        "template_versions.user_variable_values",
        "user_secrets.value",
        "workspace_agents.definition",
        "workspace_agents.pending_token",
        "workspace_builds.saved_plan",
        "workspace_builds.state",
    }

    # The operator puts a new key first (the derived one stays readable behind it) and rotates; the first run
    # is interrupted after one value.
    rotating = with_keys(app_factory, settings, NEW)
    start_checked(rotating)

    def stop_after_first(column: str, done: int, total: int) -> None:
        raise Interrupted

    with rotating.app_context(), pytest.raises(Interrupted):
        rotate(current_keyring(), batch_size=1, progress=stop_after_first)
    with rotating.app_context():
        halfway = encryption_status(current_keyring())
        assert halfway.values_on(NEW_ID) == 1 and halfway.values_on(derived_id) == before.values_on(derived_id) - 1
        assert db.session.get(EncryptionKeyRecord, derived_id).revoked_at is None  # type: ignore[union-attr]

        seen: list[tuple[str, int, int]] = []
        result = rotate(current_keyring(), batch_size=2, progress=lambda *step: seen.append(step))
        assert result.remaining == 0 and result.revoked == [derived_id]
        assert result.reencrypted == before.values_on(derived_id) - 1
        assert ("workspace_builds.state", 2, 2) in seen
        after = encryption_status(current_keyring())
        assert after.values_on(NEW_ID) == before.values_on(derived_id) and after.values_on(derived_id) == 0
        assert db.session.get(EncryptionKeyRecord, derived_id).revoked_at is not None  # type: ignore[union-attr]
        again = rotate(current_keyring())
        assert (again.reencrypted, again.revoked, again.remaining) == (0, [], 0)

    # The old key may go: a server with only the new one (and another secret key) starts and reads everything.
    only_new = with_keys(app_factory, settings, NEW, secret_key="another secret key")
    start_checked(only_new)
    with only_new.app_context():
        states = db.session.scalars(select(WorkspaceBuild.state).where(WorkspaceBuild.state.is_not(None))).all()
        assert states == [STATE, STATE]
        versions = db.session.scalars(select(TemplateVersion)).all()
        assert [version.user_variable_values for version in versions] == [
            (NameValue(name="db_password", value=SENSITIVE_VALUE),)
        ]
        assert {agent.definition.env["DB_PASSWORD"] for agent in db.session.scalars(select(WorkspaceAgent))} == {
            ENV_SECRET
        }
    plan = only_new.test_client().get(version_resources(only_new), headers=personas["bob"].auth)
    assert plan.status_code == 200 and plan.json[0]["agents"][0]["name"] == "main"


def test_a_server_without_the_key_of_its_data_refuses_to_start(
    app_factory: Callable[[Settings], Flask], settings: Settings, personas: dict[str, Persona], app: Flask
) -> None:
    writer = with_keys(app_factory, settings, OLD)
    start_checked(writer)
    run_the_flow(writer, personas)

    stranger = with_keys(app_factory, settings, NEW)
    with stranger.app_context(), pytest.raises(KeyProblem) as caught:
        check_keys(current_keyring())
    message = str(caught.value)
    assert f"encrypted with key {OLD_ID}, which is not configured" in message and "--encryption-keys" in message
    assert "\n" not in message
    # Had it started anyway, nothing would be silently unreadable: a request that needs a secret says why.
    plan = stranger.test_client().get(version_resources(stranger), headers=personas["bob"].auth)
    assert plan.status_code == 503 and OLD_ID in plan.json["message"]

    # The old key given behind the new one is enough; a key with a colliding id is not.
    start_checked(with_keys(app_factory, settings, NEW, OLD))
    with writer.app_context():
        record = db.session.get(EncryptionKeyRecord, OLD_ID)
        assert record is not None
        record.digest = "0" * 64
        db.session.commit()
    with writer.app_context(), pytest.raises(KeyProblem, match=f"encryption key {OLD_ID} is not the key"):
        check_keys(current_keyring())


def slipway(data_dir: Path, *args: str, keys: str) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("SLIPWAY_")}
    env.update(SLIPWAY_DATA_DIR=str(data_dir), SLIPWAY_ENCRYPTION_KEYS=keys)
    return subprocess.run([SLIPWAY, *args], env=env, capture_output=True, text=True, timeout=120, check=False)


def test_the_readme_rotation_procedure_with_real_servers(tmp_path: Path) -> None:
    data = tmp_path / "data"
    person = {"username": "alice", "email": "alice@example.com", "password": "correct-horse-battery"}
    with ServerProcess(data, "--provisioner-daemons", "0", env={"SLIPWAY_ENCRYPTION_KEYS": b64(OLD)}) as server:
        assert httpx.post(f"{server.url}/api/v2/users/first", json=person).status_code == 201
        token = httpx.post(f"{server.url}/api/v2/users/login", json=person).json()["session_token"]
        auth = {"Authorization": f"Bearer {token}"}
        upload = httpx.post(
            f"{server.url}/api/v2/files",
            content=tar_of({"main.tf": 'variable "v" {\n  sensitive = true\n}\n'}),
            headers={**auth, "Content-Type": "application/x-tar"},
        )
        for number in range(3):
            version = httpx.post(
                f"{server.url}/api/v2/templateversions",
                json={"file_id": upload.json()["id"], "user_variable_values": [{"name": "v", "value": f"s{number}"}]},
                headers=auth,
            )
            assert version.status_code == 201, version.text

    # A server given only a new key refuses, in one line naming the key it lacks.
    refused = run_server_once("--data-dir", str(data), "--provisioner-daemons", "0", "--encryption-keys", b64(NEW))
    assert refused.returncode == 2
    # Besides Alembic's notes on the migrations it checked, one line.
    (line,) = [line for line in refused.stderr.splitlines() if not line.startswith("INFO  [alembic")]
    assert line.startswith(f"slipway: the database holds secrets encrypted with key {OLD_ID}, which is not configured")

    # 1. the new key first, the old one behind it; 2. restart; 3. rotate (the server keeps running); 4. drop the old.
    with ServerProcess(data, "--provisioner-daemons", "0", env={"SLIPWAY_ENCRYPTION_KEYS": b64(NEW, OLD)}):
        status = slipway(data, "server", "encryption", "status", keys=b64(NEW, OLD))
        assert status.returncode == 0, status.stderr
        assert f"  {NEW_ID}: encrypts, 0 values" in status.stdout
        assert f"  {OLD_ID}: decrypts, 3 values" in status.stdout
        assert f"  template_versions.user_variable_values: {OLD_ID}: 3" in status.stdout

        rotated = slipway(data, "server", "encryption", "rotate", "--batch-size", "2", keys=b64(NEW, OLD))
        assert rotated.returncode == 0, rotated.stderr
        assert "  template_versions.user_variable_values: 2/3" in rotated.stdout
        assert "  template_versions.user_variable_values: 3/3" in rotated.stdout
        assert f"Revoked {OLD_ID}" in rotated.stdout and "remove it from --encryption-keys" in rotated.stdout

    status = slipway(data, "server", "encryption", "status", keys=b64(NEW))
    assert f"  {NEW_ID}: encrypts, 3 values" in status.stdout
    assert f"  {OLD_ID}: NOT CONFIGURED, 0 values, revoked" in status.stdout
    with ServerProcess(data, "--provisioner-daemons", "0", env={"SLIPWAY_ENCRYPTION_KEYS": b64(NEW)}) as server:
        token = httpx.post(f"{server.url}/api/v2/users/login", json=person).json()["session_token"]
        assert httpx.get(f"{server.url}/api/v2/templates", headers={"Authorization": f"Bearer {token}"}).is_success

    # Misuse is one line on stderr and exit 1.
    missing = slipway(data, "server", "encryption", "rotate", keys=b64(OLD))
    assert missing.returncode == 1 and missing.stderr.count("\n") == 1
    assert missing.stderr.startswith(f"slipway: the database holds secrets encrypted with key {NEW_ID}")
    elsewhere = slipway(tmp_path / "typo", "server", "encryption", "status", keys=b64(NEW))
    assert elsewhere.returncode == 1 and "holds no secret_key: give the server's --data-dir" in elsewhere.stderr
    assert not (tmp_path / "typo").exists()
    bad = slipway(data, "server", "encryption", "status", keys="nope!")
    assert bad.returncode == 1
    assert (
        bad.stderr == "slipway: SLIPWAY_ENCRYPTION_KEYS: key 1 is not base64 (make one with: openssl rand -base64 32)\n"
    )
