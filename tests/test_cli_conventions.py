"""CLI conventions (issue 19 part 9): every list takes -o table|json and -c columns, `--help` groups commands,
errors are one line and a hint, and `slipway completion` prints a script that completes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import click
import pytest

from cli.main import COMMANDS, SECTIONS, cli
from tests.conftest import PASSWORD, run_cli
from tests.support.server import ServerProcess

# Every list command, and a column it has that is not among its defaults.
LISTS = {
    ("list",): "id",
    ("templates", "list"): "id",
    ("templates", "versions", "list"): "error",
    ("users", "list"): "login_type",
    ("tokens", "list"): "id",
    ("secrets", "list"): "id",
    ("provisioner", "list"): "tags",
    ("provisioner", "jobs", "list"): "priority",
    ("provisioner", "keys", "list"): "tags",
    ("sharing", "list"): "id",
    ("groups", "list"): "id",
    ("organizations", "list"): "id",
    ("organizations", "members", "list"): "user_id",
    ("templates", "permissions", "list"): "id",
}


def _list_commands(group: click.Group, ctx: click.Context, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if isinstance(command, click.Group):
            yield from _list_commands(command, ctx, (*path, name))
        elif name == "list":
            yield (*path, name)


def test_every_list_command_takes_output_and_columns() -> None:
    ctx = click.Context(cli)
    found = set(_list_commands(cli, ctx))
    assert found == set(LISTS), "a new list command: give it @list_options and add it to LISTS"
    for path in found:
        command: click.Command = cli
        for name in path:
            assert isinstance(command, click.Group)
            found_command = command.get_command(ctx, name)
            assert found_command is not None
            command = found_command
        options = {option for param in command.params for option in param.opts}
        assert {"-o", "--output", "-c", "--column"} <= options, path


def test_help_groups_every_command_once() -> None:
    result = run_cli("--help")
    assert result.returncode == 0, result.stderr
    headings = [line[:-1] for line in result.stdout.splitlines() if line.endswith(":") and not line.startswith(" ")]
    assert headings == ["Options", *SECTIONS]
    listed = [line.split()[0] for line in result.stdout.split("Workspaces:")[1].splitlines() if line.startswith("  ")]
    assert sorted(listed) == sorted(COMMANDS)


@pytest.fixture(scope="module")
def live_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with ServerProcess(tmp_path_factory.mktemp("conventions") / "data", "--provisioner-daemons", "0") as server:
        yield server


@pytest.fixture(scope="module")
def owner_env(live_server: ServerProcess, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("SLIPWAY_")}
    env["XDG_CONFIG_HOME"] = str(tmp_path_factory.mktemp("config"))
    first = run_cli("login", live_server.url, env=env, input_text=f"olga\nolga@example.com\n{PASSWORD}\n{PASSWORD}\n")
    assert first.returncode == 0, first.stderr
    token = run_cli("tokens", "create", "--name", "ci", env=env)
    assert token.returncode == 0, token.stderr
    return env


# Lists of one thing's parts (a template's versions or access list, a workspace's sharing list) need that thing
# named.
PARTS_OF_ONE = (("templates", "versions"), ("templates", "permissions"), ("sharing", "list"))


@pytest.mark.parametrize("path", [path for path in LISTS if path[:2] not in PARTS_OF_ONE])
def test_list_output_and_columns(path: tuple[str, ...], owner_env: dict[str, str]) -> None:
    as_json = run_cli(*path, "-o", "json", env=owner_env)
    assert as_json.returncode == 0, as_json.stderr
    assert isinstance(json.loads(as_json.stdout), list)

    extra = LISTS[path]
    table = run_cli(*path, "-c", f"{extra},status" if "status" in _columns(path) else extra, env=owner_env)
    assert table.returncode == 0, table.stderr
    header = table.stdout.splitlines()[0].split()
    assert header == ([extra.upper(), "STATUS"] if "status" in _columns(path) else [extra.upper()])

    repeated = run_cli(*path, "-c", extra, "--column", _columns(path)[0], env=owner_env)
    assert repeated.stdout.splitlines()[0].split() == [extra.upper(), _columns(path)[0].upper()]

    unknown = run_cli(*path, "-c", f"{extra},bogus", env=owner_env)
    assert unknown.returncode == 2
    assert "no column 'bogus'; the columns are: " in unknown.stderr and extra in unknown.stderr.splitlines()[-1]


def test_rows_follow_the_chosen_columns(owner_env: dict[str, str]) -> None:
    users = run_cli("users", "list", "-c", "email,username", env=owner_env).stdout.splitlines()
    assert users[0].split() == ["EMAIL", "USERNAME"] and users[1].split() == ["olga@example.com", "olga"]
    tokens = run_cli("tokens", "list", "-o", "table", "-c", "name", env=owner_env).stdout.splitlines()
    assert tokens == ["NAME", "ci"]


def _columns(path: tuple[str, ...]) -> list[str]:
    command: click.Command = cli
    ctx = click.Context(cli)
    for name in path:
        assert isinstance(command, click.Group)
        found = command.get_command(ctx, name)
        assert found is not None
        command = found
    help_text = next(param for param in command.params if param.name == "columns").help or ""
    return help_text.split("all: ")[1].rstrip(").").split(",")


def test_a_404_is_one_line_and_a_hint(owner_env: dict[str, str]) -> None:
    result = run_cli("provisioner", "keys", "delete", "nosuch", env=owner_env)
    assert result.returncode == 1
    error, hint = result.stderr.splitlines()
    assert error.startswith("Error: ") and "nosuch" in error
    assert hint.startswith("Hint: check the name or id")


def test_an_unreachable_server_is_one_line_and_a_hint(tmp_path: Path) -> None:
    env = {key: value for key, value in os.environ.items() if not key.startswith("SLIPWAY_")}
    env |= {"SLIPWAY_URL": "http://127.0.0.1:9", "SLIPWAY_SESSION_TOKEN": "x", "XDG_CONFIG_HOME": str(tmp_path)}
    for args in (["list"], ["users", "list", "-o", "json"], ["templates", "versions", "list", "base"]):
        result = run_cli(*args, env=env)
        assert result.returncode == 1 and "Traceback" not in result.stderr
        error, hint = result.stderr.splitlines()
        assert error.startswith("Error: cannot reach http://127.0.0.1:9")
        assert hint.startswith("Hint: is the server up and the URL right?")


def _slipway() -> str:
    found = shutil.which("slipway") or str(Path(__file__).resolve().parent.parent / ".venv" / "bin" / "slipway")
    return found


def _complete(words: str, env: dict[str, str] | None = None) -> list[str]:
    """Source `slipway completion bash` in a fresh bash, complete the last word of ``words``, print COMPREPLY."""
    slipway = _slipway()
    script = f"""
        set -e
        source <("{slipway}" completion bash)
        complete -p slipway
        COMP_WORDS=({words})
        COMP_CWORD=$(( ${{#COMP_WORDS[@]}} - 1 ))
        [[ "{words}" == *" " ]] && COMP_WORDS+=("") && COMP_CWORD=$(( COMP_CWORD + 1 ))
        _slipway_completion slipway  # as bash calls it: the command name first
        printf '%s\\n' "${{COMPREPLY[@]}}"
    """
    path = os.pathsep.join([str(Path(slipway).parent), os.environ.get("PATH", "")])
    result = subprocess.run(
        ["bash", "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "PATH": path, **(env or {})},
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("complete ") and lines[0].endswith(" slipway")
    return lines[1:]


def test_bash_completion_completes_commands_subcommands_and_options() -> None:
    assert _complete("slipway pro") == ["provisioner", "provisionerd"]
    assert _complete("slipway provisioner k") == ["keys"]
    assert _complete("slipway users list --out") == ["--output"]
    assert _complete("slipway list -o ") == ["table", "json"]
    assert _complete("slipway completion ") == ["bash", "fish", "zsh"]


@pytest.mark.parametrize("shell", ["zsh", "fish"])
def test_other_shells_get_a_script(shell: str) -> None:
    result = run_cli("completion", shell)
    assert result.returncode == 0 and "_SLIPWAY_COMPLETE" in result.stdout and f"{shell}_complete" in result.stdout
    bad = run_cli("completion", "tcsh")
    assert bad.returncode == 2 and "'tcsh' is not one of" in bad.stderr


def test_unexpected_errors_become_one_line_and_a_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    import httpx

    from cli.errors import DEBUG_VARIABLE, unexpected

    monkeypatch.delenv(DEBUG_VARIABLE, raising=False)
    lost = unexpected(httpx.ReadError("connection reset"))
    assert lost is not None and lost.message == "lost the connection to the server: connection reset"
    assert lost.hint.startswith("check your network")
    disk = unexpected(PermissionError(13, "Permission denied", "/etc/x"))
    assert disk is not None and disk.message == "[Errno 13] Permission denied: '/etc/x'"
    bug = unexpected(KeyError("name"))
    assert bug is not None and bug.message == "unexpected KeyError: 'name'" and DEBUG_VARIABLE in bug.hint
    monkeypatch.setenv(DEBUG_VARIABLE, "1")
    assert unexpected(KeyError("name")) is None  # the traceback, for whoever asked for it
