"""Shared workspaces end to end: a real server with built-in daemons, the `local` example's workspace of alice with
its real agent and a dev server inside it, and carol, a member it is shared with, who opens SSH with the CLI and
the app's WebSocket, and loses both the moment alice removes the share."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from tests.support.deployment import ECHO_SERVER, Deployment, running_deployment
from tests.support.net import free_port

# Closing an open session is one Redis push that the relay reads within its pop timeout (1 s): a bound for a
# loaded machine, not a sleep.
CLOSED_WITHIN_SECONDS = 10
SLIPWAY = shutil.which("slipway") or str(Path(__file__).resolve().parent.parent / ".venv" / "bin" / "slipway")


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    with running_deployment(tmp_path_factory.mktemp("sharing")) as deployment:
        deployment.push_local()
        yield deployment


def set_share(deployment: Deployment, *args: str) -> None:
    """alice's `slipway sharing ...` of her workspace `pair`."""
    result = deployment.cli("alice", "sharing", *args)
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_shared_user_loses_ssh_and_app_the_moment_the_share_is_removed(deployment: Deployment) -> None:
    port = free_port()
    deployment.create("alice", "pair", f"dev_port={port}")  # the app's share level: owner
    deployment.wait_ready("alice", "pair")
    deployment.start_server("alice", "pair", ECHO_SERVER, port)
    app = f"{deployment.url}/@alice/pair.main/apps/dev/"
    carol = deployment.people["carol"].auth
    refused = deployment.cli("carol", "ssh", "alice/pair", "true")
    assert refused.returncode != 0 and "No workspace 'alice/pair'" in refused.stderr
    assert httpx.get(app, headers=carol, timeout=30).status_code == 404

    set_share(deployment, "add", "pair", "--user", "carol:use")
    listed_shares = deployment.cli("alice", "sharing", "list", "pair").stdout.split()
    assert listed_shares[-3:] == ["carol", "user", "use"], listed_shares
    with deployment.api("carol") as api:
        listed = api.get("/workspaces").json()
    assert [(item["name"], item["owner_name"]) for item in listed] == [("pair", "alice")]
    session = subprocess.Popen(
        [SLIPWAY, "ssh", "alice/pair", "echo ready; whoami >/dev/null; sleep 600"],
        env=deployment.cli_env("carol"), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert session.stdout is not None
        assert session.stdout.readline().strip() == "ready"  # carol's shell, in alice's workspace
        with connect(app.replace("http://", "ws://") + "echo", additional_headers=carol) as websocket:
            websocket.send("hello")
            assert websocket.recv(timeout=30) == "hello"

            set_share(deployment, "remove", "pair", "--user", "carol")
            removed = time.monotonic()
            with pytest.raises(ConnectionClosed) as closed:
                websocket.recv(timeout=CLOSED_WITHIN_SECONDS)
            assert time.monotonic() - removed < CLOSED_WITHIN_SECONDS, closed.value
        status = session.wait(timeout=CLOSED_WITHIN_SECONDS)
        assert time.monotonic() - removed < CLOSED_WITHIN_SECONDS
        assert status != 0
        assert session.stderr is not None
        assert "access to this workspace was removed" in session.stderr.read()
    finally:
        session.kill()
        session.communicate()  # reaps it and closes its pipes
    # And nothing new: the workspace is gone from carol's view, every way in refused.
    assert httpx.get(app, headers=carol, timeout=30).status_code == 404
    again = deployment.cli("carol", "ssh", "alice/pair", "true")
    assert again.returncode != 0 and "No workspace 'alice/pair'" in again.stderr
    # alice's own ways in were never touched.
    assert deployment.cli("alice", "ssh", "pair", "echo still").stdout.strip() == "still"
