from __future__ import annotations

from pathlib import Path

import pytest

from app.core.config import SettingsError, load_settings
from protocol.values import parse_duration


def test_defaults_live_in_the_data_dir(tmp_path: Path) -> None:
    settings = load_settings({"SLIPWAY_DATA_DIR": str(tmp_path)})
    assert settings.address == "127.0.0.1:3000"
    assert settings.access_url == "http://127.0.0.1:3000"
    assert settings.database_url == f"sqlite:///{tmp_path}/slipway.db"
    assert settings.redis_url == f"unix://{tmp_path}/redis.sock" and settings.embedded_redis
    assert settings.provisioner_daemons == 3


def test_xdg_data_home_is_honoured(tmp_path: Path) -> None:
    assert load_settings({"XDG_DATA_HOME": str(tmp_path)}).data_dir == tmp_path / "slipway"


def test_postgres_urls_use_psycopg3() -> None:
    settings = load_settings({"SLIPWAY_DATABASE_URL": "postgresql://u:p@db/slipway"})
    assert settings.database_url == "postgresql+psycopg://u:p@db/slipway"


def test_secret_from_file(tmp_path: Path) -> None:
    secret = tmp_path / "key"
    secret.write_text("s3cret\n")
    assert load_settings({"SLIPWAY_SECRET_KEY_FILE": str(secret)}).secret_key == "s3cret"
    with pytest.raises(SettingsError, match="set only one of"):
        load_settings({"SLIPWAY_SECRET_KEY_FILE": str(secret), "SLIPWAY_SECRET_KEY": "x"})
    with pytest.raises(SettingsError, match="cannot read"):
        load_settings({"SLIPWAY_SECRET_KEY_FILE": str(tmp_path / "missing")})


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("ADDRESS", "localhost"),
        ("ADDRESS", "localhost:99999"),
        ("PROVISIONER_DAEMONS", "yes"),
        ("PROVISIONER_DAEMONS", "-1"),
        ("WEB_WORKERS", "0"),
        ("SESSION_DURATION", "0s"),
        ("LOGIN_FAILURE_WINDOW", "soon"),
        ("DATABASE_URL", "::::"),
        ("WEB_WORKER_CONNECTIONS", "lots"),
        ("MAX_LIVE_CONNECTIONS_PER_USER", "0"),
        ("MAX_LIVE_CONNECTIONS", "-5"),
        ("MAX_CONNECTIONS_PER_CLIENT", "-1"),
        ("STREAM_MAX_LIFETIME", "forever"),
        ("REQUEST_HEADER_TIMEOUT", "0s"),
    ],
)
def test_junk_is_refused_naming_the_variable(name: str, value: str) -> None:
    with pytest.raises(SettingsError, match=f"SLIPWAY_{name}"):
        load_settings({f"SLIPWAY_{name}": value})


@pytest.mark.parametrize(("text", "seconds"), [("90", 90), ("90s", 90), ("5m", 300), ("24h", 86400), ("7d", 604800)])
def test_durations(text: str, seconds: int) -> None:
    assert parse_duration(text) == seconds


def test_bad_duration() -> None:
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration("1w")


def test_connection_limits_default_to_shares_of_the_worker_slots() -> None:
    default = load_settings({})
    assert (default.web_worker_connections, default.max_live_connections_per_user) == (2000, 100)
    assert default.max_live_connections == 3000  # 3/4 of 2 workers x 2000: the rest for agents, health, sign-in
    assert default.max_connections_per_client == 500  # 1/4 of a worker's slots
    assert (default.stream_max_lifetime, default.request_header_timeout) == (1800, 10)
    scaled = load_settings({"SLIPWAY_WEB_WORKERS": "4", "SLIPWAY_WEB_WORKER_CONNECTIONS": "1000"})
    assert (scaled.max_live_connections, scaled.max_connections_per_client) == (3000, 250)
    chosen = load_settings({"SLIPWAY_MAX_LIVE_CONNECTIONS": "10", "SLIPWAY_MAX_CONNECTIONS_PER_CLIENT": "0"})
    assert (chosen.max_live_connections, chosen.max_connections_per_client) == (10, 0)
