"""The manifest is parsed tolerantly: wrong or missing fields take their defaults."""

from __future__ import annotations

import pytest

from agent.manifest import ManifestError, parse_manifest


def test_a_full_manifest() -> None:
    manifest = parse_manifest(
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
    assert manifest.stop_scripts[0].timeout_seconds == 30
    assert [script.log_source_id for script in manifest.cron_scripts] == ["s3"]
    assert manifest.metadata[0].key == "load"
    web, plain = manifest.apps
    assert web.healthcheck is not None
    assert (web.healthcheck.interval_seconds, web.healthcheck.threshold) == (5, 3)
    assert plain.healthcheck is None


def test_wrong_types_fall_back_to_defaults() -> None:
    manifest = parse_manifest(
        {
            "directory": 5,
            "environment_variables": ["not", "a", "map"],
            "scripts": [{"log_source_id": "s", "run_on_start": "yes", "timeout": "30"}, "junk"],
            "metadata": [{"script": "no key"}],
        }
    )
    assert manifest.directory == ""
    assert manifest.environment_variables == {}
    (script,) = manifest.scripts
    assert (script.run_on_start, script.timeout_seconds) == (False, 0)
    assert manifest.metadata == ()


def test_a_manifest_must_be_an_object() -> None:
    with pytest.raises(ManifestError):
        parse_manifest(["a list"])
