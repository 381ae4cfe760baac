"""Configuration from the environment, and how `python -m agent` fails on a bad one."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from agent.config import ConfigError, load_config

REPOSITORY = Path(__file__).resolve().parents[2]


def test_slipway_names_win_over_coder_names(tmp_path: Path) -> None:
    config = load_config(
        {
            "SLIPWAY_AGENT_URL": "http://slipway.example:3000/",
            "CODER_AGENT_URL": "http://coder.example",
            "SLIPWAY_AGENT_TOKEN": "slipway-token",
            "CODER_AGENT_TOKEN": "coder-token",
            "SLIPWAY_AGENT_LOG_DIR": str(tmp_path),
        }
    )
    assert config.url == "http://slipway.example:3000"
    assert config.token == "slipway-token"
    assert config.log_dir == tmp_path


def test_coder_names_work_alone_and_the_token_file_is_stripped(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("  file-token\n")
    config = load_config({"CODER_AGENT_URL": "https://coder.example/", "CODER_AGENT_TOKEN_FILE": str(token_file)})
    assert config.url == "https://coder.example"
    assert config.token == "file-token"


def test_a_slipway_token_file_wins_over_a_coder_token(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("from-file")
    environ = {"SLIPWAY_AGENT_URL": "http://x", "SLIPWAY_AGENT_TOKEN_FILE": str(token_file), "CODER_AGENT_TOKEN": "c"}
    assert load_config(environ).token == "from-file"


def test_the_token_never_shows_in_the_config_repr() -> None:
    config = load_config({"SLIPWAY_AGENT_URL": "http://x", "SLIPWAY_AGENT_TOKEN": "very-secret"})
    assert "very-secret" not in repr(config)


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({"SLIPWAY_AGENT_TOKEN": "t"}, "no server URL"),
        ({"SLIPWAY_AGENT_URL": "http://x"}, "no agent token"),
        ({"SLIPWAY_AGENT_URL": "ftp://x", "SLIPWAY_AGENT_TOKEN": "t"}, "not an http"),
        ({"SLIPWAY_AGENT_URL": "localhost:3000", "SLIPWAY_AGENT_TOKEN": "t"}, "not an http"),
        ({"SLIPWAY_AGENT_URL": "http://x", "SLIPWAY_AGENT_TOKEN_FILE": "/nonexistent/token"}, "cannot be read"),
    ],
)
def test_bad_configuration_is_one_clear_error(environ: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(environ)


def test_python_m_agent_exits_2_with_one_line_on_bad_configuration(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "agent"],
        cwd=REPOSITORY,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "SLIPWAY_AGENT_TOKEN": "t"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0
    assert "SLIPWAY_AGENT_URL" in result.stderr
