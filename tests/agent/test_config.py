"""Configuration from the environment, and how `python -m agent` fails on a bad one."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from agent.config import ConfigError, load_config
from agent.runtime_dir import RuntimeDirError, make_log_dir

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


def test_without_a_log_dir_each_agent_gets_its_own_in_the_temp_dir(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", "/daemon/tmp")
    carol = load_config({"SLIPWAY_AGENT_URL": "http://x", "SLIPWAY_AGENT_TOKEN": "carols-agent-token"})
    dave = load_config({"SLIPWAY_AGENT_URL": "http://x", "SLIPWAY_AGENT_TOKEN": "daves-agent-token"})
    assert carol.default_log_dir and dave.default_log_dir
    assert carol.log_dir.parent == dave.log_dir.parent == Path("/daemon/tmp") and carol.log_dir != dave.log_dir
    assert carol.log_dir.name.startswith("slipway-agent-") and "carol" not in carol.log_dir.name
    chosen = load_config({"SLIPWAY_AGENT_URL": "http://x", "SLIPWAY_AGENT_TOKEN": "t", "CODER_AGENT_LOG_DIR": "/l"})
    assert (chosen.log_dir, chosen.default_log_dir) == (Path("/l"), False)


def test_the_default_log_dir_is_made_private_and_one_that_is_not_the_agent_s_is_refused(tmp_path: Path) -> None:
    made = tmp_path / "made"
    make_log_dir(made, default=True)
    assert stat.S_IMODE(made.stat().st_mode) == 0o700
    loose = tmp_path / "loose"
    loose.mkdir(mode=0o777)
    os.chmod(loose, 0o777)  # noqa: S103 - what the agent must tighten
    make_log_dir(loose, default=True)
    assert stat.S_IMODE(loose.stat().st_mode) == 0o700
    # Planted in the shared temp dir by someone else: a link to elsewhere, or a file.
    (tmp_path / "link").symlink_to(made)
    (tmp_path / "file").write_text("")
    for planted in (tmp_path / "link", tmp_path / "file"):
        with pytest.raises(RuntimeDirError, match="is not a directory"):
            make_log_dir(planted, default=True)
    if os.getuid() == 0:  # only root can give a directory away
        theirs = tmp_path / "theirs"
        theirs.mkdir(mode=0o700)
        os.chown(theirs, 65534, 65534)
        with pytest.raises(RuntimeDirError, match="belongs to another user"):
            make_log_dir(theirs, default=True)
    # A directory the operator chose is created private, and an existing one is left as it is (it may be /tmp).
    chosen = tmp_path / "chosen" / "logs"
    make_log_dir(chosen, default=False)
    assert stat.S_IMODE(chosen.stat().st_mode) == 0o700
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)  # noqa: S103 - a shared directory such as /tmp
    make_log_dir(shared, default=False)
    assert stat.S_IMODE(shared.stat().st_mode) == 0o1777
