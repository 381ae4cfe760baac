"""A real deployment for end-to-end tests: `slipway server` with built-in daemons, the personas, the `local`
example pushed, and helpers that wait for workspaces and agents through the API as a user would."""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from tests.conftest import PASSWORD, PERSONA_ROLES, run_cli
from tests.support.daemon_user import daemon_writable_dir
from tests.support.server import ServerProcess

EXAMPLE = Path(__file__).resolve().parent.parent.parent / "examples" / "local"
# A server with a plain HTTP page and a WebSocket echo, run inside workspaces with the agent's own interpreter.
# /headers answers the request's headers as JSON; /set-cookies answers the headers of APP_COOKIE_HEADERS; /probe is
# a page whose script tries what a hostile app would on the dashboard's origin and writes what it got into the page.
ECHO_SERVER = """
import json
import sys
from websockets.http11 import Response
from websockets.datastructures import Headers
from websockets.sync.server import serve

APP_COOKIE_HEADERS = [
    ("Set-Cookie", "slipway_session=planted; Path=/; HttpOnly"),
    ("Set-Cookie", "session=planted; Path=/"),
    ("Set-Cookie", "remember_token=planted; Path=/; Max-Age=86400"),
    ("Set-Cookie", " Slipway_Session =planted"),
    ("Set-Cookie", "=slipway_session=planted; Path=/"),
    ("Set-Cookie", "theme=dark; Path=/; Domain=127.0.0.1; SameSite=Lax"),
    ("Set-Cookie", "pref=1"),
    ("Set-Cookie", "deep=1; path=/sub; domain=.example.com; Max-Age=60; HttpOnly"),
    ("Clear-Site-Data", '"cookies", "storage"'),
    ("Service-Worker-Allowed", "/"),
]

PROBE = b'''<!doctype html><title>probe</title><pre id="result"></pre><script>
const found = {origin: String(self.origin)};
try { found.cookie = document.cookie; } catch (error) { found.cookie = "refused: " + error.name; }
try { found.storage = String(localStorage.length); } catch (error) { found.storage = "refused: " + error.name; }
const read = (path) => fetch(path, {credentials: "include"}).then(
  (reply) => reply.text().then((text) => reply.status + " " + text.slice(0, 300)),
  (error) => "refused: " + error.name);
Promise.all([read("/api/v2/users/me"), read("/account")]).then(([api, account]) => {
  found.api = api;
  found.account = account;
  document.getElementById("result").textContent = JSON.stringify(found);
});
</script>'''

def answer(body, content_type="text/plain", extra=()):
    headers = Headers([("Content-Type", content_type), ("Content-Length", str(len(body))), *extra])
    return Response(200, "OK", headers, body)

def page(connection, request):
    if request.headers.get("Upgrade", "").lower() == "websocket":
        return None
    if request.path.startswith("/headers"):
        return answer(json.dumps(list(request.headers.raw_items())).encode(), "application/json")
    if request.path.startswith("/set-cookies"):
        return answer(b"cookies set", extra=APP_COOKIE_HEADERS)
    if request.path.startswith("/probe"):
        return answer(PROBE, "text/html")
    cookie = request.headers.get("Cookie", "")
    return answer(f"dev server ok path={request.path} cookie={cookie}".encode())

def echo(websocket):
    for message in websocket:
        websocket.send(message)

with serve(echo, "127.0.0.1", int(sys.argv[1]), process_request=page) as server:
    server.serve_forever()
"""


@dataclass
class Person:
    name: str
    token: str
    config_home: Path

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}


@dataclass
class Deployment:
    server: ServerProcess
    tmp: Path
    # Where the `local` example creates workspaces: a directory the daemons' user can write to, which (when
    # they run confined by Landlock) exists before they start.
    workspaces_root: Path = field(default_factory=lambda: daemon_writable_dir("workspaces"))
    people: dict[str, Person] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return self.server.url

    def sign_up(self) -> Deployment:
        first = httpx.post(
            f"{self.url}/api/v2/users/first",
            json={"username": "alice", "email": "alice@example.com", "password": PASSWORD},
        )
        assert first.status_code == 201, first.text
        self.people["alice"] = self._login("alice")
        with self.api("alice") as api:
            for name, roles in PERSONA_ROLES.items():
                if name == "alice":
                    continue
                body = {"username": name, "email": f"{name}@example.com", "password": PASSWORD, "roles": roles}
                made = api.post("/users", json=body)
                assert made.status_code == 201, made.text
                self.people[name] = self._login(name)
        return self

    def _login(self, name: str) -> Person:
        credentials = {"email": f"{name}@example.com", "password": PASSWORD}
        reply = httpx.post(f"{self.url}/api/v2/users/login", json=credentials)
        assert reply.status_code == 201, reply.text
        return Person(name, reply.json()["session_token"], self.tmp / f"config-{name}")

    def api(self, name: str) -> httpx.Client:
        return httpx.Client(base_url=f"{self.url}/api/v2", headers=self.people[name].auth, timeout=30)

    def cli_env(self, name: str) -> dict[str, str]:
        env = {key: value for key, value in os.environ.items() if not key.startswith("SLIPWAY_")}
        env.update(
            SLIPWAY_URL=self.url,
            SLIPWAY_SESSION_TOKEN=self.people[name].token,
            XDG_CONFIG_HOME=str(self.people[name].config_home),
        )
        return env

    def cli(self, name: str, *args: str, timeout: float = 120, input_text: str | None = None) -> Any:
        return run_cli(*args, env=self.cli_env(name), input_text=input_text, timeout=timeout)

    def push_local(self, *variables: str) -> None:
        args = ["templates", "push", "local", "-d", str(EXAMPLE)]
        for variable in (f"workspaces_root={self.workspaces_root}", *variables):
            args += ["--variable", variable]
        pushed = self.cli("alice", *args)
        assert pushed.returncode == 0, pushed.stdout + pushed.stderr

    def push_template(self, name: str, main_tf: str) -> None:
        """Push a one-file template (``main_tf``) as alice, with the CLI, as a template admin would."""
        directory = self.tmp / f"template-{name}"
        directory.mkdir()
        (directory / "main.tf").write_text(main_tf)
        pushed = self.cli("alice", "templates", "push", name, "-d", str(directory))
        assert pushed.returncode == 0, pushed.stdout + pushed.stderr

    def create(self, owner: str, name: str, *parameters: str) -> dict[str, Any]:
        args = ["create", name, "-t", "local"]
        for parameter in parameters:
            args += ["-p", parameter]
        created = self.cli(owner, *args)
        assert created.returncode == 0, created.stdout + created.stderr
        return self.workspace(owner, name)

    def workspace(self, owner: str, name: str) -> dict[str, Any]:
        with self.api(owner) as api:
            found = api.get("/workspaces", params={"owner": "me", "name": name}).json()
        assert found, f"{owner} has no workspace {name}"
        return dict(found[0])

    def agent(self, owner: str, name: str) -> dict[str, Any]:
        resources = self.workspace(owner, name)["latest_build"]["resources"]
        agents = [agent for resource in resources for agent in resource["agents"]]
        assert len(agents) == 1, agents
        return dict(agents[0])

    def wait_agent(
        self, owner: str, name: str, check: Callable[[dict[str, Any]], bool], timeout: float = 60, what: str = ""
    ) -> dict[str, Any]:
        deadline, agent = time.monotonic() + timeout, None
        while time.monotonic() < deadline:
            agent = self.agent(owner, name)
            if check(agent):
                return agent
            time.sleep(0.2)
        raise AssertionError(f"agent of {name} never became {what}: {agent}\n{self.agent_log(owner, name)}")

    def wait_ready(self, owner: str, name: str, timeout: float = 60) -> dict[str, Any]:
        return self.wait_agent(
            owner,
            name,
            lambda agent: agent["status"] == "connected" and agent["lifecycle_state"] == "ready",
            timeout,
            "connected and ready",
        )

    def start_server(self, owner: str, name: str, script: str, port: int) -> None:
        """Start a server inside the workspace through `slipway ssh`, as a user would, and wait for it."""
        directory = self.directory(owner, name)
        (directory / "server.py").write_text(script)
        started = self.cli(
            owner, "ssh", name, f"nohup {sys.executable} server.py {port} > server.log 2>&1 < /dev/null &"
        )
        assert started.returncode == 0, started.stderr
        probe = f"{sys.executable} -c 'import socket; socket.create_connection((\"127.0.0.1\", {port}))'"
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if self.cli(owner, "ssh", name, probe).returncode == 0:
                return
            time.sleep(0.3)
        raise AssertionError((directory / "server.log").read_text())

    def directory(self, owner: str, name: str) -> Path:
        return self.workspaces_root / owner / name

    def agent_log(self, owner: str, name: str) -> str:
        parts = []
        for log_file in ("agent.log", ".slipway-agent/slipway-agent.log"):
            path = self.directory(owner, name) / log_file
            if path.exists():
                parts.append(f"--- {path}\n{path.read_text()[-4000:]}")
        return "\n".join(parts)


def stop_workspaces(root: Path) -> None:
    """Whatever runs in workspaces under ``root`` (their agents would retry a stopped server forever): each
    workspace's process group, and anything else working in a workspace directory (a session's `nohup … &`)."""
    for pid_file in root.glob("*/*/workspace.pid"):
        try:
            os.killpg(int(pid_file.read_text()), signal.SIGKILL)
        except (ProcessLookupError, ValueError, PermissionError):
            pass
    for process in psutil.process_iter():
        try:
            if Path(process.cwd()).is_relative_to(root):
                process.kill()
        except (psutil.Error, OSError):
            pass


def start_deployment(
    tmp: Path,
    *extra_args: str,
    env: dict[str, str] | None = None,
    user: str | None = None,
    start_timeout: float = 90.0,
) -> Deployment:
    """`user`: run the server as that user (its daemons then too, confined by Landlock)."""
    workspaces_root = daemon_writable_dir("workspaces", user)
    server = ServerProcess(
        tmp / "data",
        "--provisioner-daemons",
        "2",
        *extra_args,
        env={"SLIPWAY_AGENT_HEARTBEAT_INTERVAL": "1s", **(env or {})},
        user=user,
    )
    server.start(start_timeout)
    return Deployment(server, tmp, workspaces_root).sign_up()


@contextmanager
def running_deployment(
    tmp: Path,
    *extra_args: str,
    env: dict[str, str] | None = None,
    user: str | None = None,
    start_timeout: float = 90.0,
) -> Iterator[Deployment]:
    """A deployment for the block; after it, its server stopped and whatever ran in its workspaces killed."""
    deployment = start_deployment(tmp, *extra_args, env=env, user=user, start_timeout=start_timeout)
    try:
        yield deployment
    finally:
        deployment.server.stop()
        stop_workspaces(deployment.workspaces_root)


# One deployment that the modules of tests/conftest.py's SHARED_DEPLOYMENT share: each uses templates, workspaces and
# secrets of its own names and never asserts on "all of them", so none needs a server of its own. They run one after
# the other in one test process, which stops it before a test of any other module.
_shared: Deployment | None = None


def shared_deployment(tmp_path_factory: pytest.TempPathFactory) -> Deployment:
    """This process's shared deployment (the personas signed up, no template pushed), started on first use."""
    global _shared
    if _shared is None:
        # The prebuilds reconciler ticks every second (tests/test_prebuilds_e2e.py); no other module's template
        # asks for prebuilds, so it has nothing to do for them.
        _shared = start_deployment(
            tmp_path_factory.mktemp("shared-deployment"), env={"SLIPWAY_PREBUILDS_INTERVAL": "1"}
        )
    return _shared


def close_shared_deployment() -> None:
    """Stop the shared deployment, if started, and whatever ran in its workspaces."""
    global _shared
    running, _shared = _shared, None
    if running is not None:
        try:
            running.server.stop()
        finally:
            stop_workspaces(running.workspaces_root)
