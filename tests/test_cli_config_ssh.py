"""`slipway config-ssh`: a managed block in the OpenSSH config that leaves every other byte alone."""

from __future__ import annotations

import shutil
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import click
import pytest

from cli.ssh import END_MARKER, START_MARKER, merge_block, read_config, render_block, write_config
from tests.conftest import PASSWORD
from tests.support.http_daemon import HttpDaemon, api_client, sign_up_owner
from tests.support.server import ServerProcess
from tests.support.ways_in import client_env, install_slipway, run_slipway
from tests.support.workspaces import WorkspaceBuilder

SLIPWAY_BIN = "/opt/slipway/bin/slipway"
# Someone else's config, with a line that is not UTF-8 and no final newline: all of it must survive as it was.
THEIRS = b"Host github.com\n  User git\n# caf\xe9 latin-1 comment\nHost *\n  ServerAliveInterval 30"


def _write(path: Path, workspaces: list[str]) -> None:
    write_config(path, merge_block(read_config(path), render_block(workspaces, SLIPWAY_BIN), str(path)))


def test_block_is_appended_and_the_rest_kept_byte_for_byte(tmp_path: Path) -> None:
    path = tmp_path / "config"
    path.write_bytes(THEIRS)
    _write(path, ["ws1", "ws2"])
    written = path.read_bytes()
    assert written.startswith(THEIRS + b"\n\n" + START_MARKER.encode() + b"\n")
    assert written.endswith(END_MARKER.encode() + b"\n")
    block = written[len(THEIRS) + 2 :].decode()
    assert "Host slipway.ws1\n  HostName slipway.ws1\n" in block
    assert f'  ProxyCommand "{SLIPWAY_BIN}" ssh --stdio ws2\n' in block
    for option in ("ConnectTimeout 0", "StrictHostKeyChecking no", "UserKnownHostsFile /dev/null", "LogLevel ERROR"):
        assert block.count(f"  {option}\n") == 2


def test_second_run_replaces_the_block_in_place(tmp_path: Path) -> None:
    path = tmp_path / "config"
    path.write_bytes(THEIRS + b"\n")
    _write(path, ["ws1", "old"])
    after = b"\nHost later\n  Port 2222\n"
    with path.open("ab") as handle:
        handle.write(after)
    _write(path, ["ws1", "ws3"])
    written = path.read_bytes()
    assert written.startswith(THEIRS + b"\n\n" + START_MARKER.encode())
    assert written.endswith(END_MARKER.encode() + b"\n" + after)
    assert written.count(START_MARKER.encode()) == 1
    assert b"slipway.ws3" in written and b"slipway.old" not in written
    # A third run with the same workspaces changes nothing.
    merged = merge_block(read_config(path), render_block(["ws1", "ws3"], SLIPWAY_BIN), str(path))
    assert merged.encode("utf-8", "surrogateescape") == written


def test_new_config_is_0600_in_a_new_0700_directory(tmp_path: Path) -> None:
    path = tmp_path / "home" / ".ssh" / "config"
    _write(path, ["ws1"])
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert path.read_text().startswith(START_MARKER + "\n")
    assert not list(path.parent.glob(".*tmp"))


def test_existing_config_keeps_its_mode(tmp_path: Path) -> None:
    path = tmp_path / "config"
    path.write_bytes(THEIRS)
    path.chmod(0o640)
    _write(path, ["ws1"])
    assert stat.S_IMODE(path.stat().st_mode) == 0o640


def test_a_symlinked_config_is_written_through_the_link(tmp_path: Path) -> None:
    real = tmp_path / "dotfiles" / "ssh_config"
    real.parent.mkdir()
    real.write_bytes(THEIRS)
    link = tmp_path / "config"
    link.symlink_to(real)
    _write(link, ["ws1"])
    assert link.is_symlink()
    assert b"slipway.ws1" in real.read_bytes()


@pytest.mark.parametrize(
    "broken",
    [
        f"{START_MARKER}\nHost slipway.ws1\n",
        f"Host x\n{END_MARKER}\n",
        f"{END_MARKER}\n{START_MARKER}\n",
        f"{START_MARKER}\n{END_MARKER}\n{START_MARKER}\n{END_MARKER}\n",
    ],
)
def test_a_broken_block_is_refused_not_guessed_at(broken: str) -> None:
    with pytest.raises(click.ClickException, match="broken slipway block"):
        merge_block(broken, render_block(["ws1"], SLIPWAY_BIN), "~/.ssh/config")


@pytest.mark.parametrize("directory", ["with space", "per%cent", "dollar$HOME", 'quo"te', "back\\slash", "tick`id`"])
def test_proxy_command_runs_the_right_executable_whatever_its_path(tmp_path: Path, directory: str) -> None:
    """The ProxyCommand line as OpenSSH treats it: %% becomes %, then `sh -c "exec <line>"` runs it."""
    folder = tmp_path / directory
    folder.mkdir()
    executable = folder / "slipway"
    executable.write_text(f'#!/bin/sh\nprintf "%s|" "$0" "$@" > "{tmp_path}/ran"\n')
    executable.chmod(0o755)
    block = render_block(["ws1"], str(executable))
    line = next(line for line in block.splitlines() if line.strip().startswith("ProxyCommand"))
    command = line.strip().removeprefix("ProxyCommand ").replace("%%", "%")
    subprocess.run(["/bin/sh", "-c", f"exec {command}"], check=True, timeout=10)
    assert (tmp_path / "ran").read_text() == f"{executable}|ssh|--stdio|ws1|"


def test_a_path_with_a_line_break_is_refused() -> None:
    with pytest.raises(click.ClickException, match="line break"):
        render_block(["ws1"], "/opt/sli\npway")


# --- the command, against a real server ---------------------------------------------------------------------------

PSK = "config-ssh-test-psk"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    env = {"SLIPWAY_PROVISIONER_DAEMON_PSK": PSK}
    with ServerProcess(tmp_path_factory.mktemp("config-ssh") / "data", "--provisioner-daemons", "0", env=env) as up:
        yield up


@pytest.fixture(scope="module")
def alice_token(server: ServerProcess) -> str:
    token = sign_up_owner(server.url, PASSWORD)
    daemon = HttpDaemon(server.url, PSK)
    with api_client(server.url, token) as api:
        builder = WorkspaceBuilder(api, daemon)
        for name in ("beta", "alpha"):
            builder.create(name, ["main"])
    daemon.close()
    return token


@pytest.fixture
def slipway(tmp_path: Path) -> Path:
    """The running `slipway` lives in a directory with a space, which ProxyCommand must survive."""
    return install_slipway(tmp_path / "Application Support" / "bin")


@pytest.fixture
def env(server: ServerProcess, alice_token: str, tmp_path: Path) -> dict[str, str]:
    return client_env(tmp_path, server.url, alice_token)


def test_command_writes_one_host_per_workspace_and_explains_how_to_use_them(
    tmp_path: Path, env: dict[str, str], slipway: Path
) -> None:
    path = tmp_path / "ssh" / "config"
    first = run_slipway(slipway, "config-ssh", "--ssh-config-file", str(path), "-y", env=env)
    assert first.returncode == 0, first.stderr
    text = path.read_text()
    assert text.index("Host slipway.alpha") < text.index("Host slipway.beta")
    assert f'ProxyCommand "{slipway}" ssh --stdio alpha' in text
    assert "ssh slipway.alpha" in first.stdout and "scp file slipway.alpha:" in first.stdout
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700

    again = run_slipway(slipway, "config-ssh", "--ssh-config-file", str(path), "-y", env=env)
    assert again.returncode == 0 and "already up to date" in again.stdout
    assert path.read_text() == text


def test_dry_run_prints_the_block_and_writes_nothing(tmp_path: Path, env: dict[str, str], slipway: Path) -> None:
    path = tmp_path / "config"
    path.write_bytes(THEIRS)
    result = run_slipway(slipway, "config-ssh", "--ssh-config-file", str(path), "--dry-run", env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(START_MARKER) and "Host slipway.beta" in result.stdout
    assert "was not changed" in result.stderr
    assert path.read_bytes() == THEIRS


def test_declining_the_prompt_leaves_the_file_alone(tmp_path: Path, env: dict[str, str], slipway: Path) -> None:
    path = tmp_path / "config"
    path.write_bytes(THEIRS)
    result = run_slipway(slipway, "config-ssh", "--ssh-config-file", str(path), env=env, input_text="n\n")
    assert result.returncode == 1 and "Write 2 host(s)" in result.stdout
    assert path.read_bytes() == THEIRS


def test_openssh_reads_the_written_config(tmp_path: Path, env: dict[str, str], slipway: Path) -> None:
    ssh_client = shutil.which("ssh")
    assert ssh_client is not None, "make test installs OpenSSH's client (make system-deps)"
    path = tmp_path / "config"
    assert run_slipway(slipway, "config-ssh", "--ssh-config-file", str(path), "-y", env=env).returncode == 0
    resolved = subprocess.run(
        [ssh_client, "-G", "-F", str(path), "slipway.alpha"], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert f'proxycommand "{slipway}" ssh --stdio alpha' in resolved
    assert "stricthostkeychecking false" in resolved
    assert "userknownhostsfile /dev/null" in resolved


def test_not_signed_in_is_one_line(tmp_path: Path, slipway: Path) -> None:
    result = run_slipway(slipway, "config-ssh", "--ssh-config-file", str(tmp_path / "config"), env=client_env(tmp_path))
    assert result.returncode == 1
    assert result.stderr.startswith("Error: You are not signed in.") and result.stderr.count("\n") == 1
    assert not (tmp_path / "config").exists()


def test_unreachable_server_is_one_line(tmp_path: Path, slipway: Path) -> None:
    env = client_env(tmp_path, "http://127.0.0.1:9", "some-token")
    result = run_slipway(slipway, "config-ssh", "--ssh-config-file", str(tmp_path / "config"), env=env)
    assert result.returncode == 1
    error, hint = result.stderr.splitlines()  # one line, and a hint
    assert error.startswith("Error: cannot reach http://127.0.0.1:9") and hint.startswith("Hint: is the server up")
