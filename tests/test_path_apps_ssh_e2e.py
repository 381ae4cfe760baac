"""Dev URLs end to end (issue 35): real apps nobody here wrote behind the path proxy, Coder's URLs, `ssh -R`, and a
workspace updated while it runs. One deployment serves the module, with one workspace of the `local` example and
one of a template that runs JupyterLab (PyPI) the way Coder's jupyterlab module does.
"""

from __future__ import annotations

import re
import signal
import socket
import socketserver
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from tests.support.browser import ARTIFACTS, browser_page, sign_in_page, watch_for_problems
from tests.support.deployment import EXAMPLE, Deployment, running_deployment
from tests.support.jupyter import WAIT, new_notebook_answers_and_reconnects
from tests.support.net import free_port
from tests.support.server import SLIPWAY
from tests.support.waiting import wait_until

JUPYTER = "/@alice/jws.main/apps/jupyterlab/"


def jupyter_template(port: int) -> str:
    """The `local` example plus Coder's jupyterlab module as it runs for a path app: no token, no password, the
    app's path as its base URL, and no ``allow_origin`` (the browser's Host must be enough). It listens on loopback
    rather than Coder's ``ip='*'``: the test machine is shared, and the Host it sees is the dashboard's."""
    flags = (
        f"--no-browser --ServerApp.base_url={JUPYTER.rstrip('/')} --ServerApp.ip=127.0.0.1 "
        f"--ServerApp.port={port} --ServerApp.token='' --ServerApp.password=''"
    )
    return (
        (EXAMPLE / "main.tf").read_text()
        + f"""
resource "coder_script" "jupyterlab" {{
  agent_id     = coder_agent.main.id
  display_name = "jupyterlab"
  run_on_start = true
  script       = "{sys.executable} -m jupyterlab {flags} > jupyterlab.log 2>&1 &"
}}

resource "coder_app" "jupyterlab" {{
  agent_id     = coder_agent.main.id
  slug         = "jupyterlab"
  display_name = "JupyterLab"
  url          = "http://localhost:{port}{JUPYTER.rstrip("/")}"
  share        = "owner"
  # Coder's module checks GET /api; a WebSocket check also catches refused WebSockets (README "App health").
  healthcheck {{
    url       = "ws://localhost:{port}{JUPYTER}api/events/subscribe"
    interval  = 5
    threshold = 6
  }}
}}
"""
    )


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    # Workspace owners open their path apps on the dashboard's origin, as in Coder: JupyterLab reads its XSRF cookie
    # and keeps state in storage, which the sandbox's opaque origin refuses.
    tmp = tmp_path_factory.mktemp("dev-urls")
    with running_deployment(tmp, "--dangerous-allow-path-app-same-origin") as deployment:
        deployment.push_local()
        template = deployment.tmp / "template-jupyter"
        template.mkdir()
        (template / "main.tf").write_text(jupyter_template(free_port()))
        pushed = deployment.cli(
            "alice", "templates", "push", "jupyter", "-d", str(template),
            "--variable", f"workspaces_root={deployment.workspaces_root}",
        )  # fmt: skip
        assert pushed.returncode == 0, pushed.stdout + pushed.stderr
        created = deployment.cli("alice", "create", "jws", "-t", "jupyter")
        assert created.returncode == 0, created.stdout + created.stderr
        deployment.wait_agent("alice", "jws", jupyter_healthy, 120, "serving JupyterLab")
        yield deployment


def jupyter_healthy(agent: dict[str, Any]) -> bool:
    return any(app["slug"] == "jupyterlab" and app["health"] == "healthy" for app in agent["apps"])


@pytest.fixture
def page() -> Iterator[Page]:
    with browser_page() as opened:
        yield opened


@pytest.mark.browser
def test_jupyterlab_runs_a_notebook_as_a_path_app_and_reconnects_after_a_reload(
    deployment: Deployment, page: Page
) -> None:
    """Jupyter refuses API writes and WebSockets whose Origin does not match their Host: with the app's own Host
    in place of the browser's, the notebook opens but no kernel ever runs a cell."""
    problems = watch_for_problems(page.context, deployment.url)
    sign_in_page(page, deployment.url)
    expect(page).to_have_url(f"{deployment.url}/workspaces")
    page.goto(f"{deployment.url}{JUPYTER}")
    new_notebook_answers_and_reconnects(page, "jupyterlab-path-app", str(ARTIFACTS))
    assert not [problem for problem in problems if "Failed to load resource" in problem or "403" in problem], problems


def test_a_workspace_updated_while_running_restarts_with_its_new_agent(deployment: Deployment) -> None:
    """A changed startup script replaces the agent (new id, new token): the `local` example's process restarts
    with it rather than keep running the old agent, which the server no longer accepts."""
    deployment.create("alice", "upd", "greeting=first")
    before = deployment.wait_ready("alice", "upd")
    deployment.push_local()  # a new active version to update to
    updated = deployment.cli("alice", "update", "upd", "-p", "greeting=second")
    assert updated.returncode == 0, updated.stdout + updated.stderr
    after = deployment.wait_agent(
        "alice",
        "upd",
        lambda agent: agent["id"] != before["id"] and agent["lifecycle_state"] == "ready",
        120,
        "replaced by a connected, ready agent",
    )
    assert after["status"] == "connected"
    assert (deployment.directory("alice", "upd") / "greeting").read_text().strip() == "second"


@pytest.mark.browser
def test_coder_s_urls_open_the_workspace_page_and_its_terminal_for_those_who_may(
    deployment: Deployment, page: Page
) -> None:
    url = deployment.url
    workspace_id, agent_id = deployment.workspace("alice", "jws")["id"], deployment.agent("alice", "jws")["id"]
    signed_out = page.request.get(f"{url}/@alice/jws", max_redirects=0)
    assert signed_out.status == 302 and "/login" in signed_out.headers["location"]

    sign_in_page(page, url)
    expect(page).to_have_url(f"{url}/workspaces")
    for path in ("/@alice/jws", "/@alice/jws.main", "/@Alice/JWS.Main"):
        page.goto(f"{url}{path}")
        expect(page).to_have_url(f"{url}/workspaces/{workspace_id}")
    session = str(uuid.uuid4())  # the terminal's query carries over
    page.goto(f"{url}/@alice/jws.main/terminal?session={session}")
    expect(page).to_have_url(f"{url}/workspaces/{workspace_id}/agents/{agent_id}/terminal?session={session}")
    expect(page.locator(".xterm")).to_be_visible(timeout=WAIT)
    page.screenshot(path=str(ARTIFACTS / "coder-url-terminal.png"))
    for missing in ("/@alice/jws.nope/terminal", "/@alice/ghost", "/@nobody/jws", "/@alice/ghost/terminal"):
        assert page.request.get(f"{url}{missing}", max_redirects=0).status == 404, missing

    # Another member may neither see alice's workspace nor learn that it exists.
    assert page.context.browser is not None
    carol = page.context.browser.new_context().new_page()
    sign_in_page(carol, url, "carol@example.com")
    expect(carol).to_have_url(f"{url}/workspaces")
    for path in ("/@alice/jws", "/@alice/jws.main/terminal", "/@alice/ghost"):
        assert carol.request.get(f"{url}{path}", max_redirects=0).status == 404, path


GREETING = b"hello from the laptop\n"


class _Greeter(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        self.request.sendall(GREETING)


def read_greeting(connect: Callable[[], socket.socket], what: str, timeout: float = 30) -> bytes:
    """What a connection made by ``connect`` reads, retried until the forward is up (ssh sets it up after its
    handshake) or ``timeout``."""
    deadline, failure = time.monotonic() + timeout, ""
    while time.monotonic() < deadline:
        try:
            with connect() as sock:
                sock.settimeout(10)
                data = b""
                while chunk := sock.recv(1024):
                    data += chunk
                if data:
                    return data
                failure = "closed without a byte"
        except OSError as exc:
            failure = str(exc)
        time.sleep(0.1)
    raise AssertionError(f"{what} never answered: {failure}")


def unix_connection(path: Path) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(str(path))
    except OSError:
        sock.close()
        raise
    return sock


def test_openssh_forwards_remote_ports_and_unix_sockets_and_local_ports(deployment: Deployment, tmp_path: Path) -> None:
    """`ssh -R` (a TCP port, and a unix socket: streamlocal-forward@openssh.com) and `ssh -L` with OpenSSH's own
    client through `slipway config-ssh`. The `local` workspace shares this machine's loopback, so the test reaches
    the workspace's end directly."""
    config = tmp_path / "ssh_config"
    written = deployment.cli("alice", "config-ssh", "--ssh-config-file", str(config), "-y")
    assert written.returncode == 0, written.stderr
    laptop = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Greeter)
    threading.Thread(target=laptop.serve_forever, daemon=True).start()
    target = f"127.0.0.1:{laptop.server_address[1]}"
    remote, local = free_port(), free_port()
    unix_path = deployment.directory("alice", "jws") / "forwarded.sock"
    command = [
        "ssh", "-F", str(config), "-N", "-o", "ExitOnForwardFailure=yes",
        "-R", f"{remote}:{target}", "-R", f"{unix_path}:{target}", "-L", f"{local}:{target}", "slipway.jws",
    ]  # fmt: skip
    env = deployment.cli_env("alice")
    with subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True) as ssh:
        try:
            workspace_port = read_greeting(lambda: socket.create_connection(("127.0.0.1", remote)), "ssh -R port")
            assert workspace_port == GREETING
            assert read_greeting(lambda: unix_connection(unix_path), "ssh -R socket") == GREETING
            assert read_greeting(lambda: socket.create_connection(("127.0.0.1", local)), "ssh -L") == GREETING
            assert ssh.poll() is None, ssh.stderr.read() if ssh.stderr else ""
        finally:
            ssh.terminate()
            ssh.wait(timeout=30)
            laptop.shutdown()
            laptop.server_close()

    # The workspace's listeners end with the connection.
    def refused() -> bool:
        try:
            socket.create_connection(("127.0.0.1", remote), timeout=5).close()
        except OSError:
            return True
        return False

    deadline = time.monotonic() + 30
    while not refused():
        assert time.monotonic() < deadline, "the workspace still listens after ssh quit"
        time.sleep(0.1)


def _connections(deployment: Deployment, q: str) -> list[dict[str, Any]]:
    with deployment.api("alice") as api:
        reply = api.get("/connectionlog", params={"q": f"workspace_owner:alice {q}"})
    assert reply.status_code == 200, reply.text
    rows: list[dict[str, Any]] = reply.json()["connection_logs"]
    return rows


def _ended(deployment: Deployment, q: str) -> dict[str, Any]:
    """The newest row ``q`` matches, once it has ended."""
    found: list[dict[str, Any]] = []

    def ended() -> bool:
        found[:] = _connections(deployment, q)
        return bool(found) and found[0]["disconnect_time"] is not None

    wait_until(ended, 30, f"a connection matching {q!r} to end")
    return found[0]


@pytest.mark.browser
def test_the_connection_log_has_an_ssh_session_a_port_forward_and_a_browsers_app_session(
    deployment: Deployment, page: Page, tmp_path: Path
) -> None:
    """Each way in is one row, with who, where from and how it ended; an app session is one row however many
    requests the page makes."""
    before = {row["id"] for row in _connections(deployment, "")}
    config = tmp_path / "ssh_config"
    assert deployment.cli("alice", "config-ssh", "--ssh-config-file", str(config), "-y").returncode == 0
    ssh = subprocess.run(
        ["ssh", "-F", str(config), "slipway.jws", "exit 0"],
        env=deployment.cli_env("alice"), capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert ssh.returncode == 0, ssh.stderr
    session = _ended(deployment, "type:ssh")
    assert session["id"] not in before and session["agent_name"] == "main" and session["workspace_name"] == "jws"
    assert session["user"]["username"] == "alice" and session["ip"] == "127.0.0.1"
    assert session["ssh_info"]["disconnect_reason"] == "closed"

    laptop = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Greeter)  # the workspace shares this loopback
    threading.Thread(target=laptop.serve_forever, daemon=True).start()
    local = free_port()
    command = [SLIPWAY, "port-forward", "jws", "--tcp", f"{local}:{laptop.server_address[1]}"]
    with subprocess.Popen(command, env=deployment.cli_env("alice"), stdout=subprocess.PIPE, text=True) as forward:
        try:
            assert forward.stdout is not None and f"127.0.0.1:{local}" in forward.stdout.readline()
            assert read_greeting(lambda: socket.create_connection(("127.0.0.1", local)), "port-forward") == GREETING
        finally:
            forward.send_signal(signal.SIGINT)
            forward.wait(timeout=30)
            laptop.shutdown()
            laptop.server_close()
    forwarded = _ended(deployment, "type:port_forwarding")
    assert forwarded["ssh_info"]["port"] == str(laptop.server_address[1])
    assert forwarded["disconnect_reason"] == "closed"

    sign_in_page(page, deployment.url)
    expect(page).to_have_url(f"{deployment.url}/workspaces")
    page.goto(f"{deployment.url}{JUPYTER}")
    # JupyterLab's shell, loaded by dozens of requests (one session). Not its launcher: the module's notebook test
    # may have left a notebook open, which JupyterLab restores in its place.
    expect(page.get_by_role("tab", name=re.compile(r"^File Browser"))).to_be_visible(timeout=WAIT)
    user_agent = page.evaluate("navigator.userAgent")
    # (The same browser's earlier visit in this module, if any, is the same session.)
    apps = _connections(deployment, "type:workspace_app status:ongoing")
    assert len(apps) == 1, apps
    assert apps[0]["web_info"]["slug_or_port"] == "jupyterlab" and apps[0]["web_info"]["user_agent"] == user_agent
    assert apps[0]["disconnect_time"] is None  # open until idle (its end reasons: tests/test_connection_log.py)

    page.goto(f"{deployment.url}/connectionlog")
    expect(page.locator("#connection-log tr[data-type='ssh']").first).to_be_visible()
    page.screenshot(path=str(ARTIFACTS / "connection-log.png"))
