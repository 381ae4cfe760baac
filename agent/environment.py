"""The environment and working directory of scripts and sessions (README "What the agent does").

Precedence, lowest first: the agent's own environment (without the token), then ``CODER=true`` and the
workspace's names, the script data and bin directories (the bin directory prefixed to ``PATH``), then the
manifest's ``environment_variables`` with ``$VAR`` expanded against everything before them.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from agent import git
from agent.config import TOKEN_VARIABLES
from protocol.agentapi import Manifest

if sys.platform != "win32":
    import pwd


@dataclass(frozen=True)
class SessionContext:
    """Where SSH sessions and terminals start and with what environment (``TERM`` comes from the client)."""

    directory: Path
    environment: Mapping[str, str]
    motd_file: str = ""


# The agent's token, and the Git helper of whatever started the agent (an agent started from another workspace's
# session must not hand its children that workspace's helper): this agent sets its own below.
_NOT_INHERITED = frozenset({*TOKEN_VARIABLES, git.SOCKET_VARIABLE, git.SECRET_VARIABLE})
_VARIABLE = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")


def expand_variables(text: str, environ: Mapping[str, str]) -> str:
    """``$NAME`` and ``${NAME}``; an unset variable becomes empty, as with Go's os.ExpandEnv that Coder uses."""
    return _VARIABLE.sub(lambda match: environ.get(match.group(1) or match.group(2), ""), text)


def home_directory(environ: Mapping[str, str] | None = None) -> str:
    environ = os.environ if environ is None else environ
    if environ.get("HOME"):
        return environ["HOME"]
    return str(Path.home())


def expand_path(raw: str, environ: Mapping[str, str]) -> str:
    """``~`` and ``$VARS`` expanded; the result may still be relative."""
    text = expand_variables(raw.strip(), environ)
    if text == "~" or text.startswith("~/"):
        text = home_directory(environ) + text[1:]
    return text


def expand_directory(raw: str, environ: Mapping[str, str]) -> Path:
    """The manifest's ``directory`` as an absolute path (home when empty), created when missing."""
    expanded = expand_path(raw, environ) if raw.strip() else home_directory(environ)
    path = Path(expanded)
    if not path.is_absolute():
        path = Path(home_directory(environ)) / path
    path.mkdir(parents=True, exist_ok=True)
    return path


def login_shell() -> str:
    if sys.platform == "win32":
        return os.environ.get("COMSPEC", "cmd.exe")
    try:
        shell = pwd.getpwuid(os.getuid()).pw_shell
    except KeyError:  # a uid without a passwd entry, common in containers
        shell = ""
    return shell or os.environ.get("SHELL") or "/bin/sh"


def shell_invocation(command: str | None) -> tuple[list[str], str]:
    """(argv, executable) for a session: the login shell as a login shell ("-bash"), or ``command`` run with -c."""
    shell = login_shell()
    if command is None:
        return ["-" + os.path.basename(shell)], shell
    return [shell, "-c", command], shell


def _user_variables() -> dict[str, str]:
    """What sshd would set for the user when the agent's own environment lacks it (containers often do)."""
    variables = {"HOME": home_directory(), "SHELL": login_shell()}
    if sys.platform != "win32":
        try:
            name = pwd.getpwuid(os.getuid()).pw_name
        except KeyError:
            name = ""
        if name:
            variables.update(USER=name, LOGNAME=name)
    return variables


def script_data_root(log_dir: Path) -> Path:
    return log_dir / "coder-script-data"


def script_bin_dir(log_dir: Path) -> Path:
    return script_data_root(log_dir) / "bin"


def build_environment(
    manifest: Manifest,
    log_dir: Path,
    *,
    log_source_id: str | None = None,
    agent_environ: Mapping[str, str] | None = None,
    git_helper: git.HelperAccess | None = None,
) -> dict[str, str]:
    """The environment of a script (with its ``log_source_id``) or of a session (without); ``git_helper``: the
    agent's Git helper, when it serves."""
    environ = {
        name: value
        for name, value in (os.environ if agent_environ is None else agent_environ).items()
        if name not in _NOT_INHERITED
    }
    for name, value in _user_variables().items():
        environ.setdefault(name, value)
    bin_dir = script_bin_dir(log_dir)
    environ.update(
        CODER="true",
        CODER_WORKSPACE_NAME=manifest.workspace_name,
        CODER_WORKSPACE_OWNER_NAME=manifest.owner_name,
        CODER_WORKSPACE_AGENT_NAME=manifest.agent_name,
        CODER_SCRIPT_BIN_DIR=str(bin_dir),
    )
    if log_source_id is not None:
        environ["CODER_SCRIPT_DATA_DIR"] = str(script_data_root(log_dir) / log_source_id)
    path = environ.get("PATH", os.defpath)
    environ["PATH"] = f"{bin_dir}{os.pathsep}{path}" if path else str(bin_dir)
    # git asks the agent for the owner's linked accounts; a template's own GIT_ASKPASS (below) still wins.
    if git_helper is not None:
        environ.update(git.helper_environment(git_helper, bin_dir))
    expanded = {name: expand_variables(value, environ) for name, value in manifest.environment_variables.items()}
    environ.update(expanded)
    for name in TOKEN_VARIABLES:  # not even when a template sets it
        environ.pop(name, None)
    return environ


def context_before_manifest() -> SessionContext:
    """Sessions dialled before the first manifest arrives start at home with the agent's environment."""
    environ = {name: value for name, value in os.environ.items() if name not in _NOT_INHERITED}
    for name, value in _user_variables().items():
        environ.setdefault(name, value)
    return SessionContext(directory=Path(home_directory()), environment=environ)
