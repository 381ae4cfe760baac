"""`slipway server` as an operator runs it: starts, serves, stops cleanly, and refuses bad settings in one line."""

from __future__ import annotations

import signal
import socket
import subprocess
from pathlib import Path

import httpx
import psutil
import pytest

from app.core.config import load_settings
from app.server.supervisor import open_listener
from tests.conftest import PASSWORD
from tests.support.daemon_user import prepare_daemon_user, shared_dir
from tests.support.http_daemon import api_client, sign_up_owner
from tests.support.net import free_port
from tests.support.provisionerd import push_import, wait_job
from tests.support.server import SLIPWAY, ServerProcess, run_server_once
from tests.support.waiting import wait_until

TERMINAL = ("succeeded", "failed", "canceled")


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_server_serves_and_stops_without_leaving_processes(tmp_path: Path, signum: int) -> None:
    server = ServerProcess(tmp_path / "data", "--provisioner-daemons", "0")
    with server:
        assert len(server.descendants) >= 3, "expected redis-server, a gunicorn master and its workers"
        first = httpx.post(
            f"{server.url}/api/v2/users/first",
            json={"username": "alice", "email": "alice@example.com", "password": "correct-horse-battery"},
        )
        assert first.status_code == 201, first.text
        login = httpx.post(
            f"{server.url}/api/v2/users/login",
            json={"email": "alice@example.com", "password": "correct-horse-battery"},
        )
        token = login.json()["session_token"]
        me = httpx.get(f"{server.url}/api/v2/users/me", headers={"Authorization": f"Bearer {token}"})
        assert me.json()["roles"] == ["owner", "member"]
        assert "/setup" in server.log()  # it told the operator where to create the first user
        assert server.stop(signum) == 0
    assert server.survivors() == []
    assert not (tmp_path / "data" / "redis.sock").exists()


def test_server_keeps_data_across_restarts(tmp_path: Path) -> None:
    body = {"username": "alice", "email": "alice@example.com", "password": "correct-horse-battery"}
    with ServerProcess(tmp_path / "data", "--provisioner-daemons", "0") as server:
        assert httpx.post(f"{server.url}/api/v2/users/first", json=body).status_code == 201
    with ServerProcess(tmp_path / "data", "--provisioner-daemons", "0") as server:
        assert httpx.post(f"{server.url}/api/v2/users/first", json=body).status_code == 409
        login = httpx.post(
            f"{server.url}/api/v2/users/login", json={"email": body["email"], "password": body["password"]}
        )
        assert login.status_code == 201


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--database-url", "not a url"], "SLIPWAY_DATABASE_URL is not a database URL"),
        (["--database-url", "mysql://x@localhost/y"], "SLIPWAY_DATABASE_URL must be sqlite"),
        (["--address", "127.0.0.1:yes"], "invalid port"),
        (["--provisioner-daemons", "lots"], "SLIPWAY_PROVISIONER_DAEMONS must be a whole number"),
        (["--access-url", "ftp://example.com"], "SLIPWAY_ACCESS_URL must be an http"),
        (["--redis-url", "http://localhost"], "SLIPWAY_REDIS_URL must start with"),
        (["--session-duration", "forever"], "SLIPWAY_SESSION_DURATION"),
    ],
)
def test_bad_setting_stops_with_one_clear_line(tmp_path: Path, args: list[str], expected: str) -> None:
    result = run_server_once("--data-dir", str(tmp_path), *args)
    assert result.returncode != 0
    assert result.stderr.strip().count("\n") == 0, result.stderr
    assert expected in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


def test_port_in_use_is_one_clear_line(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        result = run_server_once("--data-dir", str(tmp_path), "--address", f"127.0.0.1:{port}")
    assert result.returncode != 0
    assert result.stderr.strip() == f"slipway: cannot listen on 127.0.0.1:{port}: address already in use"


def test_the_port_is_held_but_refuses_connections_until_the_web_workers_listen(tmp_path: Path) -> None:
    """While a server migrates and starts its workers (seconds, more on a restart), a connection is refused rather
    than accepted and left waiting, so a client or a load balancer goes to another replica at once; the port is
    held all along (another server cannot take it)."""
    port = free_port()
    held = open_listener(load_settings({"SLIPWAY_ADDRESS": f"127.0.0.1:{port}", "SLIPWAY_DATA_DIR": str(tmp_path)}))
    with held, pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=10)


def test_unwritable_data_dir_is_one_clear_line(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    result = run_server_once("--data-dir", str(blocker / "data"))
    assert result.returncode != 0
    assert result.stderr.startswith(f"slipway: data dir {blocker / 'data'} is not writable")
    assert result.stderr.strip().count("\n") == 0


def test_unreachable_database_is_one_clear_line(tmp_path: Path) -> None:
    result = run_server_once(
        "--data-dir", str(tmp_path), "--address", f"127.0.0.1:{free_port()}",
        "--database-url", f"postgresql+psycopg://nobody@127.0.0.1:{free_port()}/nothing",
    )  # fmt: skip
    assert result.returncode != 0
    assert result.stderr.startswith("slipway: cannot use the database:")
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().count("\n") == 0


def test_version_flag() -> None:
    result = subprocess.run([SLIPWAY, "--version"], capture_output=True, text=True, check=True)
    assert result.stdout.startswith("slipway, version ")


def test_stopping_the_server_mid_build_cancels_the_build_and_leaves_no_process(tmp_path: Path) -> None:
    """Ctrl-C while a built-in daemon applies: the daemon cancels the build while the web server still takes its
    outcome, Terraform and what it started (a local-exec) end with it, and the build says why once back."""
    marker = shared_dir() / f"applying-{tmp_path.name}"  # where the daemon's user can see it
    slow = f'  provisioner "local-exec" {{\n    command = "while [ -e {marker} ]; do sleep 0.2; done"\n  }}\n'
    files = {"main.tf": f'resource "terraform_data" "slow" {{\n{slow}}}\n'}
    server = ServerProcess(tmp_path / "data", "--provisioner-daemons", "1", "--provisioner-grant-access")
    marker.touch()
    with server, api_client(server.url, sign_up_owner(server.url, PASSWORD)) as api:
        version = push_import(api, files=files)
        assert wait_job(api, version["job"]["id"], TERMINAL, timeout=180)["status"] == "succeeded"
        template = api.post("/templates", json={"name": "slow", "version_id": version["id"]}).json()
        build = api.post("/workspaces", json={"template_id": template["id"], "name": "ws"}).json()["latest_build"]
        wait_until(lambda: _running(marker), timeout=120, what="the apply's local-exec")

        assert server.stop() == 0
        assert not _running(marker), "the local-exec outlived the server"
        assert "cancel any running build first" in server.log()
        server.start()
        job = wait_job(api, build["job"]["id"], TERMINAL, timeout=60)
        assert job["status"] == "failed" and "stopped (SIGINT)" in job["error"], job
        log = " ".join(line["output"] for line in api.get(f"/workspacebuilds/{build['id']}/logs").json())
        assert "local-exec" in log and "Error running command" in log, log[-2000:]
    marker.unlink()


def _running(marker: Path) -> list[int]:
    return [
        process.pid
        for process in psutil.process_iter(["cmdline"])
        if str(marker) in " ".join(process.info["cmdline"] or [])
    ]


def _first_child_running(server: ServerProcess, program: str) -> bool:
    """Whether a process of the server runs `program` (matched in its command line); psutil races processes ending."""
    for child in server.tree():
        try:
            if program in " ".join(child.cmdline()):
                return True
        except psutil.Error:
            continue
    return False


@pytest.mark.parametrize(
    "moment",
    [
        "-m gunicorn",  # the first child: Ctrl-C while the web server loads the application, before its gate opens
        "redis-server",  # Ctrl-C while the server starts its processes and migrates
        "-m workers",  # a built-in daemon, right after /healthz answered: it is still importing
    ],
)
def test_ctrl_c_at_any_moment_of_start_up_stops_at_once_and_quietly(tmp_path: Path, moment: str) -> None:
    """Ctrl-C during start-up once left the server waiting its 30 s build-cancel grace for a daemon that never
    heard it (sent between fork and exec, the signal was lost), and daemons still importing printed KeyboardInterrupt
    tracebacks to the operator's terminal."""
    server = ServerProcess(tmp_path / "data", "--provisioner-daemons", "1")
    prepare_daemon_user()
    server._spawn(None)
    try:
        wait_until(lambda: _first_child_running(server, moment), timeout=90, what=f"the server to start {moment}")
        server.descendants = server.tree()
        assert server.stop(signal.SIGINT, timeout=20) == 0  # the bug took 30 s and more
    finally:
        for child in server.survivors():
            child.kill()
    log = server.log()
    for noise in ("Traceback", "KeyboardInterrupt", "Aborted"):
        assert noise not in log, log
    assert server.survivors() == []
