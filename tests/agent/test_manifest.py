"""The manifest is read strictly: a missing field takes its default, a wrong one is a clear error naming it."""

from __future__ import annotations

import pytest

from protocol.agentapi import Manifest
from protocol.codec import ProtocolError


def test_a_full_manifest() -> None:
    manifest = Manifest.from_json(
        {
            "agent_id": "a1",
            "agent_name": "main",
            "workspace_name": "ws1",
            "owner_name": "alice",
            "directory": "~/project",
            "environment_variables": {"A": "1"},
            "scripts": [
                {"log_source_id": "s1", "display_name": "Startup Script", "script": "echo", "run_on_start": True},
                {"log_source_id": "s2", "script": "echo bye", "run_on_stop": True, "timeout": 30},
                {"log_source_id": "s3", "script": "date", "cron": "0 * * * * *"},
            ],
            "metadata": [{"key": "load", "script": "uptime", "interval": 10, "timeout": 1}],
            "apps": [
                {"slug": "web", "url": "http://localhost:8080", "healthcheck": {"url": "http://localhost:8080/h"}},
                {"slug": "plain", "healthcheck": None},
            ],
            "heartbeat_seconds": 15,
            "future_field": {"ignored": True},
        }
    )
    assert manifest.directory == "~/project"
    assert [script.log_source_id for script in manifest.start_scripts] == ["s1"]
    assert manifest.stop_scripts[0].timeout == 30
    assert [script.log_source_id for script in manifest.cron_scripts] == ["s3"]
    assert manifest.metadata[0].key == "load"
    web, plain = manifest.apps
    assert web.healthcheck is not None
    assert (web.healthcheck.interval, web.healthcheck.threshold) == (5, 3)
    assert plain.healthcheck is None
    assert [app.slug for app in manifest.checked_apps] == ["web"]


def test_missing_fields_take_their_defaults() -> None:
    manifest = Manifest.from_json({"scripts": [{"log_source_id": "s"}]})
    assert manifest.directory == ""
    assert manifest.environment_variables == {}
    (script,) = manifest.scripts
    assert (script.run_on_start, script.timeout) == (False, 0)
    assert manifest.heartbeat_seconds == 15


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"directory": 5}, "directory"),
        ({"environment_variables": ["not", "a", "map"]}, "environment_variables"),
        ({"scripts": [{"log_source_id": "s", "run_on_start": "yes"}]}, "scripts[0].run_on_start"),
        ({"scripts": [{"timeout": "30"}]}, "scripts[0].timeout"),
        ({"scripts": ["junk"]}, "scripts[0]"),
        ({"metadata": [{"key": "k", "interval": -1}]}, "metadata[0].interval"),
        ({"heartbeat_seconds": True}, "heartbeat_seconds"),
    ],
)
def test_a_wrong_field_is_an_error_naming_it(data: dict[str, object], field: str) -> None:
    with pytest.raises(ProtocolError) as caught:
        Manifest.from_json(data)
    assert caught.value.field == field


def test_a_manifest_must_be_an_object() -> None:
    with pytest.raises(ProtocolError, match="expected an object"):
        Manifest.from_json(["a list"])
