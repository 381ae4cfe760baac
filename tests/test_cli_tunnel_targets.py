"""Before any tunnel opens, `slipway ssh` and `slipway port-forward` pick the workspace's agent, and every reason they
cannot is one line that says what to do. Against a real server; the agents never connect (no agent process)."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import PASSWORD
from tests.support.http_daemon import HttpDaemon, api_client, sign_up_owner
from tests.support.server import ServerProcess
from tests.support.ways_in import client_env, install_slipway, run_slipway
from tests.support.workspaces import WorkspaceBuilder

PSK = "tunnel-targets-test-psk"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    env = {"SLIPWAY_PROVISIONER_DAEMON_PSK": PSK}
    with ServerProcess(tmp_path_factory.mktemp("targets") / "data", "--provisioner-daemons", "0", env=env) as up:
        yield up


@pytest.fixture(scope="module")
def alice_token(server: ServerProcess) -> str:
    return sign_up_owner(server.url, PASSWORD)


@pytest.fixture(scope="module")
def builder(server: ServerProcess, alice_token: str) -> Iterator[WorkspaceBuilder]:
    daemon = HttpDaemon(server.url, PSK)
    with api_client(server.url, alice_token) as api:
        built = WorkspaceBuilder(api, daemon)
        built.create("solo", ["main"])
        built.create("pair", ["dev", "db"])
        built.create("bare", [])
        built.stop(built.create("halted", ["main"]))
        yield built
    daemon.close()


@pytest.fixture(scope="module")
def slipway(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return install_slipway(tmp_path_factory.mktemp("bin"))


@pytest.fixture
def env(server: ServerProcess, alice_token: str, builder: WorkspaceBuilder, tmp_path: Path) -> dict[str, str]:
    return client_env(tmp_path, server.url, alice_token)


def _one_line_error(result: subprocess.CompletedProcess[str], expected: str) -> None:
    assert result.returncode == 1, result.stderr
    assert result.stderr == f"Error: {expected}\n"


@pytest.mark.parametrize("command", [["ssh", "halted", "true"], ["ssh", "--stdio", "slipway.halted"]])
def test_a_stopped_workspace_says_to_start_it(command: list[str], slipway: Path, env: dict[str, str]) -> None:
    result = run_slipway(slipway, *command, env=env)
    _one_line_error(result, "workspace halted is stopped: run `slipway start halted`")
    assert result.stdout == ""  # under ProxyCommand, stdout belongs to the SSH stream


def test_port_forward_to_a_stopped_workspace_fails_and_frees_its_port(slipway: Path, env: dict[str, str]) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    result = run_slipway(slipway, "port-forward", "halted", "--tcp", f"{port}:80", env=env)
    _one_line_error(result, "workspace halted is stopped: run `slipway start halted`")
    with socket.socket() as again:
        again.bind(("127.0.0.1", port))


def test_several_agents_must_be_named(slipway: Path, env: dict[str, str]) -> None:
    result = run_slipway(slipway, "ssh", "pair", "true", env=env)
    _one_line_error(result, "workspace pair has several agents (db, dev): name one as pair.<agent>")


def test_an_unknown_agent_lists_the_real_ones(slipway: Path, env: dict[str, str]) -> None:
    result = run_slipway(slipway, "port-forward", "pair.web", "-p", "0", env=env)
    assert result.returncode == 2  # port 0 is not a port: usage errors come before any lookup
    result = run_slipway(slipway, "ssh", "pair.web", "true", env=env)
    _one_line_error(result, "workspace pair has no agent named 'web' (its agents: db, dev)")


def test_a_workspace_without_agents_says_so(slipway: Path, env: dict[str, str]) -> None:
    result = run_slipway(slipway, "ssh", "bare", env=env)
    _one_line_error(result, "workspace bare has no agent: its template declares no coder_agent")


def test_an_agent_that_timed_out_is_one_line_naming_what_to_do(slipway: Path, env: dict[str, str]) -> None:
    time.sleep(1.1)  # solo's agent has a 1 s connection timeout
    result = run_slipway(slipway, "ssh", "slipway.solo.main", "true", env=env)
    _one_line_error(
        result,
        "agent main of solo never connected (timed out): "
        "check `slipway logs solo`, then `slipway stop solo` and `slipway start solo`",
    )


def test_a_connecting_agent_is_waited_for(slipway: Path, env: dict[str, str], builder: WorkspaceBuilder) -> None:
    # Long enough that the CLI is surely asking while the agent is still "connecting", on a machine busy with other
    # tests (the timeout runs from the build, and a loaded machine takes seconds to start the CLI).
    builder.create("slow", ["main"], connection_timeout=8)
    started = time.monotonic()
    result = run_slipway(slipway, "ssh", "--stdio", "slow", env=env)
    assert time.monotonic() - started >= 2  # it waited until the server declared the timeout
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert lines[0] == "Waiting for agent main of slow to connect..."
    assert lines[1].startswith("Error: agent main of slow never connected (timed out)")
    assert len(lines) == 2


def test_an_unknown_workspace_is_one_line(slipway: Path, env: dict[str, str]) -> None:
    _one_line_error(
        run_slipway(slipway, "ssh", "nosuch", env=env), "You have no workspace named 'nosuch' (see `slipway list`)."
    )


def test_not_signed_in_is_one_line(slipway: Path, tmp_path: Path) -> None:
    result = run_slipway(slipway, "ssh", "solo", env=client_env(tmp_path))
    _one_line_error(
        result, "You are not signed in. Run `slipway login <url>`, or set SLIPWAY_URL and SLIPWAY_SESSION_TOKEN."
    )


def test_a_bad_token_says_to_log_in(slipway: Path, server: ServerProcess, tmp_path: Path) -> None:
    result = run_slipway(slipway, "ssh", "solo", env=client_env(tmp_path, server.url, "not-a-token"))
    assert result.returncode == 1
    error, hint = result.stderr.splitlines()
    assert error.startswith("Error: ") and hint == "Hint: sign in again with `slipway login <url>`."


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["ssh", "--stdio", "solo", "ls"], "--stdio relays the SSH stream only"),
        (["ssh", "--stdio", "-t", "solo"], "--stdio relays the SSH stream only"),
        (["ssh", "solo."], "expected WORKSPACE or WORKSPACE.AGENT, got 'solo.'"),
    ],
)
def test_bad_ssh_usage_exits_2(args: list[str], message: str, slipway: Path, env: dict[str, str]) -> None:
    result = run_slipway(slipway, *args, env=env)
    assert result.returncode == 2 and message in result.stderr
