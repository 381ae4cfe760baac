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
