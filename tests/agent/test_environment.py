"""Directory and variable expansion, and the environment scripts and sessions get."""

from __future__ import annotations

from pathlib import Path

from agent.environment import build_environment, expand_directory, expand_variables
from protocol.agentapi import Manifest


def test_variables_expand_like_go_os_expand_env() -> None:
    environ = {"NAME": "ws1", "HOME": "/home/alice"}
    assert expand_variables("$HOME/${NAME}/x", environ) == "/home/alice/ws1/x"
    assert expand_variables("$UNSET/x", environ) == "/x"
    assert expand_variables("cost: 5$", environ) == "cost: 5$"


def test_directory_expands_tilde_and_variables_and_is_created(tmp_path: Path) -> None:
    environ = {"HOME": str(tmp_path), "PROJECT": "demo"}
    directory = expand_directory("~/src/$PROJECT", environ)
    assert directory == tmp_path / "src" / "demo"
    assert directory.is_dir()
    assert expand_directory("", environ) == tmp_path
    assert expand_directory("relative/dir", environ) == tmp_path / "relative" / "dir"


def test_session_environment_has_no_script_data_dir_and_no_token(tmp_path: Path) -> None:
    manifest = Manifest(workspace_name="ws1", environment_variables={"PATH": "/opt/tools:$PATH", "TOOL": "$HOME/t"})
    environ = build_environment(
        manifest,
        tmp_path,
        agent_environ={
            "PATH": "/bin",
            "HOME": "/home/alice",
            "CODER_AGENT_TOKEN": "x",
            "SLIPWAY_AGENT_TOKEN_FILE": "/t",
        },
    )
    assert "CODER_SCRIPT_DATA_DIR" not in environ
    assert environ["PATH"] == f"/opt/tools:{tmp_path / 'coder-script-data' / 'bin'}:/bin"
    assert environ["TOOL"] == "/home/alice/t"
    assert "CODER_AGENT_TOKEN" not in environ
    assert "SLIPWAY_AGENT_TOKEN_FILE" not in environ
    assert environ["CODER"] == "true"
