"""WebSockets count against the same caps as streams, on a real deployment with a real agent: a person's
tunnels and terminals beyond their cap are refused with 429 before the upgrade, and the agent has its own
budget (its halves of those tunnels never count against the person, and its control connection always gets in).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from contextlib import ExitStack

import httpx
import psutil
import pytest
import redis
from websockets.exceptions import InvalidStatus
from websockets.sync.client import ClientConnection, connect

from app.core.limits import holders
from tests.conftest import PASSWORD
from tests.support.deployment import ECHO_SERVER, Deployment, running_deployment
from tests.support.net import free_port
from tests.support.waiting import wait_until

PER_USER = 3
PER_AGENT = 4  # its control connection and carol's three tunnels


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    tmp = tmp_path_factory.mktemp("ws-limits")
    env = {
        "SLIPWAY_MAX_LIVE_CONNECTIONS_PER_USER": str(PER_USER),
        "SLIPWAY_MAX_LIVE_CONNECTIONS_PER_AGENT": str(PER_AGENT),
    }
    with running_deployment(tmp, env=env, start_timeout=120) as deployment:
        deployment.push_local()
        yield deployment


def agent_token(deployment: Deployment, owner: str, name: str) -> str:
    """The token the workspace's agent runs with (from its environment, as the template handed it over)."""
    group = int((deployment.directory(owner, name) / "workspace.pid").read_text())
    for process in psutil.process_iter(["cmdline"]):
        cmdline = process.info["cmdline"] or []
        if "agent" in cmdline and "-m" in cmdline and os.getpgid(process.pid) == group:
            return str(process.environ()["CODER_AGENT_TOKEN"])
    raise AssertionError(f"no agent process in the process group of {name}")


def session_cookie(url: str, email: str) -> str:
    """Sign in through the login form, as a browser does; the dashboard's session cookie."""
    with httpx.Client(base_url=url) as browser:
        token = re.search(r'name="csrf_token" value="([^"]+)"', browser.get("/login").text)
        assert token, "no CSRF token on the login page"
        signed_in = browser.post("/login", data={"email": email, "password": PASSWORD, "csrf_token": token[1]})
        assert signed_in.status_code == 302, signed_in.text
        return "; ".join(f"{name}={value}" for name, value in browser.cookies.items())


def open_when_free(url: str, headers: dict[str, str], timeout: float = 20) -> ClientConnection:
    """Connect, waiting while the person's budget is full: tunnels that just closed (`slipway ssh` sessions)
    give their slots back once the server has seen them close."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return connect(url, additional_headers=headers, open_timeout=30)
        except InvalidStatus as exc:
            if exc.response.status_code != 429 or time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def fetch_through(tunnel: ClientConnection) -> bytes:
    """An HTTP request to the workspace's server, as raw bytes through the tunnel (binary frames)."""
    tunnel.send(b"GET /through-the-tunnel HTTP/1.1\r\nHost: workspace\r\nConnection: close\r\n\r\n")
    received = b""
    while b"dev server ok" not in received:
        message = tunnel.recv(timeout=15)
        if isinstance(message, bytes):
            received += message
    return received


def test_a_persons_websockets_beyond_the_cap_are_refused_before_the_upgrade(deployment: Deployment) -> None:
    with ExitStack() as stack:
        refused_beyond_the_cap(deployment, stack)
    deployment.wait_agent("carol", "ws", lambda a: a["status"] == "connected", 60, "connected again")


def refused_beyond_the_cap(deployment: Deployment, stack: ExitStack) -> None:
    deployment.create("carol", "ws")
    agent = deployment.wait_ready("carol", "ws")
    port = free_port()
    deployment.start_server("carol", "ws", ECHO_SERVER, port)
    base = deployment.url.replace("http://", "ws://") + f"/api/v2/workspaceagents/{agent['id']}/tunnel"
    carol = deployment.people["carol"].auth
    with deployment.api("carol") as api:
        carol_id = api.get("/users/me").json()["id"]
    ledger = redis.Redis.from_url(deployment.server.redis_url)
    stack.callback(ledger.close)
    # The `slipway ssh` sessions that started the server have ended and given their slots back (the agent's
    # halves included), so the agent holds just its control connection.
    wait_until(lambda: holders(ledger, f"user:{carol_id}") == 0 and holders(ledger, f"agent:{agent['id']}") == 1)
    # Each tunnel has an agent half too; those count against the agent, so all three of carol's work.
    tunnels = []
    for _ in range(PER_USER):
        tunnels.append(stack.enter_context(open_when_free(f"{base}?service=tcp&port={port}", carol)))
        assert b"dev server ok path=/through-the-tunnel" in fetch_through(tunnels[-1])

    with pytest.raises(InvalidStatus) as refused:
        connect(f"{base}?service=tcp&port={port}", additional_headers=carol, open_timeout=30)
    assert refused.value.response.status_code == 429
    assert b"You have 3 live streams open (log streams, terminals, tunnels); close some tabs" in (
        refused.value.response.body or b""
    )
    # The web terminal (the dashboard's cookie) draws on the same budget.
    terminal = {"Cookie": session_cookie(deployment.url, "carol@example.com"), "Origin": deployment.url}
    with pytest.raises(InvalidStatus) as refused_terminal:
        connect(f"{base}?service=pty&rows=24&cols=80", additional_headers=terminal, open_timeout=30)
    assert refused_terminal.value.response.status_code == 429

    # A closed tunnel gives its slot back (once the server has seen it close).
    tunnels.pop().close()
    tunnels.append(stack.enter_context(open_when_free(f"{base}?service=tcp&port={port}", carol)))
    assert b"dev server ok" in fetch_through(tunnels[-1])

    # The agent is at its budget (its control connection and three tunnel halves), yet a control connection
    # still gets in: people's tunnels can never lock an agent out. (This one takes over from the agent's,
    # which then reconnects.)
    rpc = deployment.url.replace("http://", "ws://") + "/api/v2/workspaceagents/me/rpc"
    token = {"Slipway-Agent-Token": agent_token(deployment, "carol", "ws")}
    assert holders(ledger, f"agent:{agent['id']}") == PER_AGENT
    with connect(rpc, additional_headers=token, open_timeout=30):
        pass
