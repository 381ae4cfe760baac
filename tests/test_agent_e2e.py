"""Workspace agents end to end with the `local` example: a real server with built-in daemons, real Terraform,
the real agent in each workspace, the CLI's ways in, and OpenSSH's own ssh, scp and rsync.

One deployment serves the module (starting workspaces is the slow part); tests that break a workspace on
purpose (killing its agent, stopping it) use workspaces of their own.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
import redis
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from protocol.agentapi import Dial
from protocol.channels import AGENT_CONTROL_CHANNEL_PREFIX, TUNNEL_KEY_PREFIX
from tests.support.deployment import ECHO_SERVER, Deployment, running_deployment
from tests.support.net import free_port
from tests.support.provisionerd import DaemonProcess
from tests.support.server import SLIPWAY
from tests.support.waiting import wait_until

# What the server logs when a control message for an agent is not one it may pass on.
UNSIGNED_DIAL_DROPPED = "dropped a control message that the server did not sign"
REPLAYED_DIAL_DROPPED = "dropped a dial it had already passed on"


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    tmp = tmp_path_factory.mktemp("agents")
    with running_deployment(tmp) as deployment:
        deployment.push_local("agent_connection_timeout=6")
        yield deployment


@pytest.fixture(scope="module")
def ws1(deployment: Deployment) -> str:
    deployment.create("alice", "ws1", "greeting=hi there")
    deployment.wait_ready("alice", "ws1")
    return "ws1"


def agent_process(deployment: Deployment, owner: str, name: str) -> psutil.Process:
    group = int((deployment.directory(owner, name) / "workspace.pid").read_text())
    for process in psutil.process_iter(["cmdline"]):
        cmdline = process.info["cmdline"] or []
        if "agent" in cmdline and "-m" in cmdline and os.getpgid(process.pid) == group:
            return process
    raise AssertionError(f"no agent process in the process group of {name}")


def wait_for_lines(api: httpx.Client, agent_id: str, text: str, timeout: float = 10) -> list[dict[str, object]]:
    """The agent's log once a line contains ``text`` (script output reaches the server in batches)."""
    deadline, lines = time.monotonic() + timeout, []
    while time.monotonic() < deadline:
        lines = api.get(f"/workspaceagents/{agent_id}/logs").json()
        if any(text in str(line["output"]) for line in lines):
            return list(lines)
        time.sleep(0.2)
    raise AssertionError(f"no log line with {text!r}: {lines}")


def test_the_agent_connects_runs_the_startup_script_and_reports(deployment: Deployment, ws1: str) -> None:
    agent = deployment.agent("alice", ws1)
    assert agent["status"] == "connected" and agent["lifecycle_state"] == "ready"
    assert agent["expanded_directory"] == str(deployment.directory("alice", ws1))
    assert (deployment.directory("alice", ws1) / "greeting").read_text().strip() == "hi there"
    with deployment.api("alice") as api:
        lines = wait_for_lines(api, agent["id"], "wrote 'hi there'")
        workspace = api.get(f"/workspaces/{deployment.workspace('alice', ws1)['id']}").json()
    sources = {source["id"]: source["display_name"] for source in agent["log_sources"]}
    assert {sources[line["source_id"]] for line in lines} == {"Startup Script"}
    assert workspace["health"] == {"healthy": True, "failing_agents": []}
    metadata = deployment.wait_agent(
        "alice", ws1, lambda a: all(item["result"]["collected_at"] for item in a["metadata"]), what="measured"
    )["metadata"]
    values = {item["description"]["key"]: item["result"]["value"] for item in metadata}
    assert len(values["load"].split()) == 3 and values["disk"]
    printed = deployment.cli("alice", "logs", ws1).stdout  # the build's log, then what the agent's scripts printed
    assert "==> Agent main: Startup Script" in printed and "wrote 'hi there'" in printed


def test_ssh_runs_commands_with_their_output_input_and_exit_status(deployment: Deployment, ws1: str) -> None:
    result = deployment.cli("alice", "ssh", ws1, "echo out; echo err >&2; pwd; exit 7")
    assert result.returncode == 7, result.stderr
    assert result.stdout.splitlines() == ["out", str(deployment.directory("alice", ws1))]
    assert "err" in result.stderr
    piped = deployment.cli("alice", "ssh", ws1, "--", "wc -c", input_text="12345")  # "--" ends options, as in ssh
    assert piped.returncode == 0 and piped.stdout.strip() == "5"
    environment = deployment.cli(
        "alice", "ssh", ws1, "echo $CODER $CODER_WORKSPACE_NAME; env | grep -c '^[A-Z_]*AGENT_TOKEN='"
    )
    assert environment.stdout.split() == ["true", ws1, "0"]  # the agent's token never reaches a session
    home = deployment.cli("alice", "ssh", ws1, "cd ~ && pwd")
    assert home.stdout.strip() == str(deployment.directory("alice", ws1))
    # The example starts the agent as a background job under nohup (SIGQUIT, SIGHUP ignored): its sessions must
    # still get them, or Ctrl-\ would quit nothing.
    quit_status = deployment.cli("alice", "ssh", ws1, "sh -c 'kill -QUIT $$; echo survived'; echo status=$?")
    assert quit_status.stdout.split() == ["status=131"], quit_status.stdout


def test_scp_and_rsync_work_through_config_ssh(deployment: Deployment, ws1: str, tmp_path: Path) -> None:
    config = tmp_path / "ssh_config"
    written = deployment.cli("alice", "config-ssh", "--ssh-config-file", str(config), "-y")
    assert written.returncode == 0, written.stderr
    assert f"Host slipway.{ws1}" in config.read_text()
    payload = os.urandom(300_000)
    source = tmp_path / "payload.bin"
    source.write_bytes(payload)
    env = deployment.cli_env("alice")
    target = deployment.directory("alice", ws1)
    scp = subprocess.run(
        ["scp", "-F", str(config), str(source), f"slipway.{ws1}:{target}/copied.bin"],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert scp.returncode == 0, scp.stderr
    assert (target / "copied.bin").read_bytes() == payload
    back = tmp_path / "back.bin"
    scp_back = subprocess.run(
        ["scp", "-F", str(config), f"slipway.{ws1}:{target}/copied.bin", str(back)],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert scp_back.returncode == 0 and back.read_bytes() == payload, scp_back.stderr
    rsync = subprocess.run(
        ["rsync", "-e", f"ssh -F {config}", str(source), f"slipway.{ws1}:{target}/synced.bin"],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert rsync.returncode == 0, rsync.stderr
    assert (target / "synced.bin").read_bytes() == payload
    plain = subprocess.run(
        ["ssh", "-F", str(config), f"slipway.{ws1}", "echo plain ssh; exit 3"],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert plain.returncode == 3 and plain.stdout.strip() == "plain ssh"
    relative = subprocess.run(  # `scp file host:` lands in the workspace's home, which is its directory
        ["scp", "-F", str(config), str(source), f"slipway.{ws1}:"],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert relative.returncode == 0, relative.stderr
    assert (target / "payload.bin").read_bytes() == payload


def test_port_forward_reaches_a_server_inside_the_workspace(deployment: Deployment, ws1: str) -> None:
    remote, local = free_port(), free_port()
    deployment.start_server("alice", ws1, ECHO_SERVER, remote)
    command = [SLIPWAY, "port-forward", ws1, "--tcp", f"{local}:{remote}"]
    env = deployment.cli_env("alice")
    with subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as forward:
        assert forward.stdout is not None and forward.stderr is not None
        try:
            assert f"127.0.0.1:{local}" in forward.stdout.readline()
            page = httpx.get(f"http://127.0.0.1:{local}/hello", timeout=10)
            assert page.status_code == 200 and "dev server ok path=/hello" in page.text
            with connect(f"ws://127.0.0.1:{local}/echo") as websocket:
                websocket.send("through the forward")
                assert websocket.recv(timeout=10) == "through the forward"
        finally:
            forward.send_signal(signal.SIGINT)
        assert forward.wait(timeout=10) == 0
        assert "Traceback" not in forward.stderr.read()


def test_a_members_daemon_gets_no_redis_and_waits_for_jobs_over_http(deployment: Deployment, tmp_path: Path) -> None:
    """Security audit finding 1 began here: a member's user-scoped daemon was handed the server's own Redis."""
    carol = deployment.people["carol"]
    registration = httpx.post(
        f"{deployment.url}/api/v2/provisionerd/register",
        json={"name": "carols-probe", "tags": {"scope": "user"}},
        headers=carol.auth,
    )
    assert registration.status_code == 201, registration.text
    assert registration.json()["redis_url"] is None and registration.json()["queues"] == []
    env = {"SLIPWAY_SESSION_TOKEN": carol.token}
    with DaemonProcess(deployment.url, "carols-laptop", tmp_path, "--tag", "scope=user", env=env) as daemon:
        with deployment.api("alice") as api:
            listed = daemon.wait_registered(api)
        assert listed["tags"]["scope"] == "user" and listed["status"] == "idle"
        wait_until(lambda: "waiting for jobs over HTTP" in daemon.log(), what="the daemon to wait over HTTP")
        assert "listening on" not in daemon.log()  # no RQ worker: it never reached Redis


def next_message(subscription: redis.client.PubSub, timeout: float = 10) -> bytes:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        message = subscription.get_message(timeout=0.5)
        if message is not None:
            return bytes(message["data"])
    raise AssertionError("nothing was published on the channel")


def test_dials_forged_or_replayed_through_redis_reach_no_agent(deployment: Deployment, ws1: str) -> None:
    """Someone holding the Redis URL and password (a host the operator trusted with it, or its leaked address)
    publishes dials for alice's agent: as the server used to accept them (a plain dial and a tunnel record naming
    the agent), with a guessed signature, and a genuine signed dial captured off the channel and replayed. The
    server drops each one, the agent runs nothing and opens no tunnel, and alice's own sessions keep working."""
    agent_id = deployment.agent("alice", ws1)["id"]
    marker = deployment.directory("alice", ws1) / "forged-dial-ran"
    channel = AGENT_CONTROL_CHANNEL_PREFIX + agent_id
    dropped_before = deployment.server.log().count(UNSIGNED_DIAL_DROPPED)
    replays_before = deployment.server.log().count(REPLAYED_DIAL_DROPPED)
    with redis.Redis.from_url(deployment.server.redis_url) as attacker:
        listener = attacker.pubsub(ignore_subscribe_messages=True)
        listener.subscribe(channel)
        assert deployment.cli("alice", "ssh", ws1, "true").returncode == 0
        captured = next_message(listener)
        listener.close()
        genuine_tunnel = Dial.loads(json.loads(captured)["dial"]).tunnel_id

        old_style, guessed = str(uuid.uuid4()), str(uuid.uuid4())
        run_marker = {"service": "pty", "command": f"touch {marker}"}
        attacker.set(f"{TUNNEL_KEY_PREFIX}{old_style}:agent", agent_id, ex=60)
        attacker.set(f"{TUNNEL_KEY_PREFIX}{guessed}:agent", f"{agent_id}.{'0' * 64}", ex=60)
        forged = [
            json.dumps({"type": "dial", "tunnel_id": old_style, "host": "127.0.0.1", "port": 0, "rows": 24,
                        "cols": 80, **run_marker}),
            json.dumps({"dial": Dial(tunnel_id=guessed, **run_marker).dumps(),
                        "issued_at": f"{time.time():.3f}", "signature": "0" * 64}),
        ]  # fmt: skip
        for message in (*forged, captured):
            assert attacker.publish(channel, message) >= 1  # the server's processes received it
        wait_until(
            lambda: (
                deployment.server.log().count(UNSIGNED_DIAL_DROPPED) >= dropped_before + 2
                and deployment.server.log().count(REPLAYED_DIAL_DROPPED) >= replays_before + 1
            ),
            what="the server to drop the forged and the replayed dials",
        )
        # A genuine session after them: the agent has had every earlier dial by the time it ends.
        again = deployment.cli("alice", "ssh", ws1, "echo still works")
        assert again.returncode == 0 and again.stdout.strip() == "still works", again.stderr
        assert not marker.exists()
        for tunnel_id in (old_style, guessed):
            assert attacker.llen(f"{TUNNEL_KEY_PREFIX}{tunnel_id}:to-user") == 0
        # The agent's half announces itself with an "o" frame: the genuine one was taken by alice's session.
        frames = attacker.lrange(f"{TUNNEL_KEY_PREFIX}{genuine_tunnel}:to-user", 0, -1)
        assert not [frame for frame in frames if frame[:1] == b"o"], frames


def test_apps_are_proxied_with_websockets_and_health(deployment: Deployment) -> None:
    port = free_port()
    deployment.create("alice", "apps", f"dev_port={port}")
    deployment.wait_ready("alice", "apps")
    path = f"{deployment.url}/@alice/apps.main/apps/dev/"
    auth = deployment.people["alice"].auth
    down = httpx.get(path, headers=auth, timeout=30)
    assert down.status_code == 502 and "App Dev server is not reachable" in down.text
    assert f"nothing listens on localhost:{port}" in down.text

    deployment.start_server("alice", "apps", ECHO_SERVER, port)
    page = httpx.get(f"{path}sub/page?q=1", headers={**auth, "Cookie": "slipway_session=secret; theme=dark"})
    assert page.status_code == 200
    # The app sees its own path and cookies, never Slipway's session.
    assert page.text == "dev server ok path=/sub/page?q=1 cookie=theme=dark"
    # It answers with its own headers: the dashboard's policy would break its pages. Slipway's page is Slipway's.
    # But in a sandbox, for its owner too (alice here): path apps share the dashboard's origin (issue 34, H2).
    assert not {"x-frame-options", "x-content-type-options"} & set(page.headers.keys())
    [policy] = page.headers.get_list("content-security-policy")
    assert policy.startswith("sandbox allow-scripts") and "allow-same-origin" not in policy, policy
    assert "script-src 'self'" in down.headers["content-security-policy"]
    ws_url = path.replace("http://", "ws://") + "echo"
    with connect(ws_url, additional_headers=auth) as websocket:
        for message in ("hello", b"\x00\x01binary"):
            websocket.send(message)
            assert websocket.recv(timeout=10) == message
    deployment.wait_agent(
        "alice", "apps", lambda agent: agent["apps"][0]["health"] == "healthy", timeout=30, what="app healthy"
    )
    carol = httpx.get(path, headers=deployment.people["carol"].auth)
    assert carol.status_code == 404  # share level owner: nobody else's app to open


def test_a_killed_agent_is_disconnected_then_timed_out(deployment: Deployment) -> None:
    deployment.create("alice", "doomed")
    deployment.wait_ready("alice", "doomed")
    agent_process(deployment, "alice", "doomed").kill()
    gone = deployment.wait_agent("alice", "doomed", lambda a: a["status"] == "disconnected", 15, "disconnected")
    assert gone["health"]["healthy"] is False
    workspace = deployment.workspace("alice", "doomed")
    assert workspace["health"] == {"healthy": False, "failing_agents": [gone["id"]]}
    deployment.wait_agent("alice", "doomed", lambda a: a["status"] == "timeout", 20, "timed out")
    refused = deployment.cli("alice", "ssh", "doomed", "true")
    assert refused.returncode != 0 and "agent main of doomed lost its connection long ago (timed out)" in refused.stderr


def test_stop_runs_the_shutdown_script_and_turns_the_agent_off(deployment: Deployment) -> None:
    deployment.create("alice", "stopper")
    agent = deployment.wait_ready("alice", "stopper")
    start_build = deployment.workspace("alice", "stopper")["latest_build"]["id"]
    # What a user leaves running in a session (not a child of the workspace's process) stops with the workspace.
    started = deployment.cli("alice", "ssh", "stopper", "nohup sleep 1000 > /dev/null 2>&1 < /dev/null & echo $!")
    assert started.returncode == 0, started.stderr
    left_running = psutil.Process(int(started.stdout.strip()))
    stopped = deployment.cli("alice", "stop", "stopper")
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert "stopped at" in (deployment.directory("alice", "stopper") / "shutdown.log").read_text()
    assert not left_running.is_running() or left_running.status() == psutil.STATUS_ZOMBIE
    with deployment.api("alice") as api:
        [resource] = [r for r in api.get(f"/workspacebuilds/{start_build}/resources").json() if r["agents"]]
        wait_for_lines(api, agent["id"], "is stopping: noted in")
    assert resource["agents"][0]["lifecycle_state"] == "off"

    refused = deployment.cli("alice", "ssh", "stopper", "true")
    assert refused.returncode != 0
    assert "workspace stopper is stopped: run `slipway start stopper`" in refused.stderr
    forward = deployment.cli("alice", "port-forward", "stopper", "--tcp", f"{free_port()}:80", timeout=30)
    assert forward.returncode != 0 and "slipway start stopper" in forward.stderr


def test_agents_reconnect_when_the_server_restarts(deployment: Deployment, ws1: str) -> None:
    before = deployment.agent("alice", ws1)
    deployment.server.stop()
    deployment.server.start()
    after = deployment.wait_agent(
        "alice", ws1, lambda a: a["status"] == "connected" and a["last_connected_at"] != before["last_connected_at"],
        timeout=60, what="reconnected",
    )  # fmt: skip
    assert after["id"] == before["id"] and after["lifecycle_state"] == "ready"  # start scripts do not run twice
    assert deployment.cli("alice", "ssh", ws1, "true").returncode == 0


def test_a_wrong_token_is_refused_and_retried_quietly(deployment: Deployment, tmp_path: Path) -> None:
    env = {key: value for key, value in os.environ.items() if not key.startswith(("SLIPWAY_", "CODER_"))}
    env.update(SLIPWAY_AGENT_URL=deployment.url, SLIPWAY_AGENT_TOKEN="not-a-token", SLIPWAY_AGENT_LOG_DIR=str(tmp_path))
    agent = subprocess.Popen([sys.executable, "-m", "agent"], env=env, stderr=subprocess.DEVNULL, cwd=tmp_path)
    try:
        time.sleep(8)
        assert agent.poll() is None  # it keeps trying
    finally:
        agent.send_signal(signal.SIGTERM)
        agent.wait(timeout=15)
    log = (tmp_path / "slipway-agent.log").read_text()
    assert "401" in log and log.count("401") <= 2, log  # one line for the problem, not one per retry
    assert "not-a-token" not in log


def _terminal_output_until(websocket: Any, text: bytes, timeout: float = 30) -> bytes:
    """The terminal's bytes from ``websocket`` until ``text`` has come (control messages skipped)."""
    output, deadline = b"", time.monotonic() + timeout
    while text not in output:
        frame = websocket.recv(timeout=max(deadline - time.monotonic(), 0.01))
        if isinstance(frame, bytes):
            output += frame
    return output


def test_a_web_terminal_session_survives_its_tunnel_closing(deployment: Deployment, ws1: str) -> None:
    """Coder's reconnecting PTY: the same ``reconnect`` id after the tunnel closed attaches to the same shell
    and replays what it printed; another id is another shell."""
    agent_id = deployment.agent("alice", ws1)["id"]
    base = deployment.url.replace("http://", "ws://") + f"/api/v2/workspaceagents/{agent_id}/tunnel"
    alice = deployment.people["alice"].auth
    session = f"{base}?service=pty&rows=24&cols=80&reconnect={uuid.uuid4()}"
    with connect(session, additional_headers=alice, open_timeout=30) as first:
        first.send(b"MARK=kept-$((40+2)); echo before-$MARK\n")
        _terminal_output_until(first, b"before-kept-42")
    with connect(session, additional_headers=alice, open_timeout=30) as second:
        _terminal_output_until(second, b"before-kept-42")  # the scrollback, replayed
        second.send(b"echo after-$MARK\n")
        _terminal_output_until(second, b"after-kept-42")  # the same shell, its variable still set
    other = f"{base}?service=pty&rows=24&cols=80&reconnect={uuid.uuid4()}"
    with connect(other, additional_headers=alice, open_timeout=30) as fresh:
        fresh.send(b"echo other-${MARK:-unset}; exit\n")
        assert b"before-kept-42" not in _terminal_output_until(fresh, b"other-unset")
    # Another user who may connect to the agent (an owner too) naming the same id gets a shell of their own.
    with deployment.api("alice") as api:
        carol = next(user for user in api.get("/users").json() if user["username"] == "carol")
        assert api.patch(f"/users/{carol['id']}", json={"roles": ["owner"]}).status_code == 200
        try:
            with connect(session, additional_headers=deployment.people["carol"].auth, open_timeout=30) as stranger:
                stranger.send(b"echo carol-${MARK:-unset}; exit\n")
                assert b"kept-42" not in _terminal_output_until(stranger, b"carol-unset")
        finally:
            assert api.patch(f"/users/{carol['id']}", json={"roles": []}).status_code == 200
    with connect(session, additional_headers=alice, open_timeout=30) as last:
        last.send(b"exit 5\n")  # ends the kept session: nothing is left running in the workspace
        exits = []
        with contextlib.suppress(ConnectionClosed):
            while True:
                frame = last.recv(timeout=30)
                if isinstance(frame, str):
                    exits.append(json.loads(frame))
        assert [(item["type"], item["code"]) for item in exits] == [("exit", 5)]
