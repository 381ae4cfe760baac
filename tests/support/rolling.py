"""A rolling deployment for tests and bench/deploy.py: 3 `slipway server` replicas (each with a drain period) on one
PostgreSQL and one Redis behind Debian's nginx, external daemons and log viewers that reach them only through nginx,
a template whose builds print numbered lines slowly, and the two ways a replica goes: a rolling restart (SIGTERM,
wait, start, next once ready, as Kubernetes rolls a Deployment) and kill -9."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from websockets.exceptions import WebSocketException
from websockets.sync.client import connect

from app.server.embedded_redis import start_embedded_redis
from app.server.processes import stop
from tests.conftest import run_cli
from tests.support.deployment import EXAMPLE, stop_workspaces
from tests.support.postgres import PostgresCluster
from tests.support.provisionerd import DAEMON_PSK, DaemonProcess, push_import, wait_job
from tests.support.server import SLIPWAY
from tests.support.soak import NUMBERED_LINE, PASSWORD, SECRET_KEY, TERMINAL, Replica, SoakPlan, soak_template
from tests.support.sse import events

NGINX_CONF = """
worker_processes 1;
daemon off;
pid {root}/nginx.pid;
error_log {root}/nginx-error.log warn;
events {{ worker_connections 4096; }}
http {{
    log_format upstreams '$status $upstream_status "$upstream_addr" $request_method $uri';
    access_log {root}/nginx-access.log upstreams;
    client_body_temp_path {root}/nginx-body;
    proxy_temp_path {root}/nginx-proxy;
    # WebSockets (agents' control connections, tunnels, terminals) pass the upgrade on; other requests keep the
    # upstream connection alive (an empty Connection header).
    map $http_upgrade $connection_upgrade {{
        default upgrade;
        "" "";
    }}
    upstream slipway {{
{servers}
        keepalive 32;
    }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://slipway;
            proxy_http_version 1.1;
            proxy_set_header Upgrade $http_upgrade;
            proxy_set_header Connection $connection_upgrade;
            proxy_set_header Host $http_host;
            proxy_set_header X-Forwarded-For $remote_addr;
            # Live streams: no buffering, and longer than a heartbeat's silence.
            proxy_buffering off;
            # Bodies (a template's archive) in memory and streamed on: nginx's workers run as another user when it
            # is started as root, and may not write temporary files into the test's private directory.
            proxy_request_buffering off;
            client_body_buffer_size 16m;
            client_max_body_size 64m;
            proxy_read_timeout 120s;
            # A replica that is gone refuses the connection: the request goes to the next one.
            proxy_next_upstream error timeout http_502;
            proxy_connect_timeout 2s;
        }}
        # Workspaces' apps: a 502 here is Slipway's answer that the app is unreachable, not a replica gone (nginx
        # would mark every replica failed for one app that is down).
        location /@ {{
            proxy_pass http://slipway;
            proxy_http_version 1.1;
            proxy_set_header Upgrade $http_upgrade;
            proxy_set_header Connection $connection_upgrade;
            proxy_set_header Host $http_host;
            proxy_set_header X-Forwarded-For $remote_addr;
            proxy_buffering off;
            proxy_read_timeout 120s;
            proxy_next_upstream error timeout;
            proxy_connect_timeout 2s;
        }}
        # Agents' control connections and tunnels (WebSockets): a draining replica refuses a new control connection
        # with 503 before the upgrade, and nginx takes it to the next replica. No http_502 here: a WebSocket that a
        # replica accepted is not nginx's to send elsewhere.
        location /api/v2/workspaceagents/ {{
            proxy_pass http://slipway;
            proxy_http_version 1.1;
            proxy_set_header Upgrade $http_upgrade;
            proxy_set_header Connection $connection_upgrade;
            proxy_set_header Host $http_host;
            proxy_set_header X-Forwarded-For $remote_addr;
            proxy_buffering off;
            proxy_request_buffering off;
            client_body_buffer_size 16m;
            client_max_body_size 64m;
            proxy_read_timeout 120s;
            proxy_next_upstream error timeout http_503;
            proxy_connect_timeout 2s;
        }}
    }}
}}
"""


@dataclass
class Follower:
    build_id: str
    ids: list[int] = field(default_factory=list)
    numbers: list[int] = field(default_factory=list)
    back_seconds: list[float] = field(default_factory=list)  # stream ended -> the next one answered 200
    refused: list[int] = field(default_factory=list)
    ended: str = ""


@dataclass
class Watch:
    """Something a person keeps using through the proxy, tried again and again: each time it was out (from the
    start of the first failed try to the next that worked) and what the failed tries got."""

    out_seconds: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    tries: int = 0
    answered: int = 0
    down_since: float | None = None

    def reset(self) -> None:
        self.out_seconds.clear()
        self.failures.clear()
        self.tries = self.answered = 0
        self.down_since = None

    def tried(self, began: float, failure: str) -> None:
        self.tries += 1
        if not failure:
            self.answered += 1
        if failure:
            self.failures.append(failure)
            if self.down_since is None:
                self.down_since = began
        elif self.down_since is not None:
            self.out_seconds.append(time.monotonic() - self.down_since)
            self.down_since = None


@dataclass
class SSHSession:
    """`slipway ssh` sessions held open one after another: how each one ended (exit status, its last words) and
    how long the next took to be up."""

    ends: list[tuple[int, str]] = field(default_factory=list)
    back_seconds: list[float] = field(default_factory=list)
    up: threading.Event = field(default_factory=threading.Event)


# An agent whose control connection is gone drops a dial published meanwhile: a probe that gets no answer within
# this long is a failed try (the next one is dialed anew), not a 15 s wait for the dial's own time-out.
PROBE_ANSWER_SECONDS = 3.0


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def start_nginx(root: Path, ports: list[int], port: int) -> tuple[subprocess.Popen[bytes], str]:
    servers = "\n".join(f"        server 127.0.0.1:{p} max_fails=1 fail_timeout=2s;" for p in ports)
    conf = root / "nginx.conf"
    conf.write_text(NGINX_CONF.format(root=root, servers=servers, port=port))
    process = subprocess.Popen(["nginx", "-c", str(conf), "-p", str(root)], stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.TransportError):
            if httpx.get(f"{url}/healthz", timeout=5).status_code == 200:
                return process, url
        time.sleep(0.1)
    raise RuntimeError(f"nginx did not answer: {(root / 'nginx-error.log').read_text()}")


def follow(url: str, token: str, follower: Follower, stopping: threading.Event) -> None:
    """Follow a build's log as EventSource does, through the proxy: on a stream that ends before the build, back
    after the last event id (the server asks for a 1 s retry). The time back includes that second's wait."""
    ended_at: float | None = None
    auth = {"Authorization": f"Bearer {token}"}
    with httpx.Client(timeout=httpx.Timeout(30, read=60), headers=auth) as client:
        while not stopping.is_set() and not follower.ended:
            headers = {"Last-Event-ID": str(follower.ids[-1])} if follower.ids else {}
            try:
                path = f"{url}/api/v2/workspacebuilds/{follower.build_id}/logs"
                with client.stream("GET", path, params={"follow": "true"}, headers=headers) as response:
                    if response.status_code != 200:
                        response.read()
                        follower.refused.append(response.status_code)
                    else:
                        if ended_at is not None:
                            follower.back_seconds.append(time.monotonic() - ended_at)
                            ended_at = None
                        for event in events(response):
                            if event.event == "end":
                                follower.ended = str(event.json["status"])
                                return
                            if event.event == "log" and event.id is not None:
                                follower.ids.append(event.id)
                                numbered = NUMBERED_LINE.search(str(event.json["output"]))
                                if numbered:
                                    follower.numbers.append(int(numbered[1]))
            except httpx.TransportError:
                pass
            if ended_at is None:
                ended_at = time.monotonic()
            stopping.wait(1.0)


def probe_agent(url: str, token: str, agent_id: str, port: int, watch: Watch, stopping: threading.Event) -> None:
    """Reach the workspace's dev server through a new tunnel each time (a dial over the agent's control
    connection): while the agent is connected to some replica this answers; its time out is the agent's time
    away."""
    ws = url.replace("http://", "ws://") + f"/api/v2/workspaceagents/{agent_id}/tunnel?service=tcp&port={port}"
    while not stopping.is_set():
        began, failure = time.monotonic(), ""
        try:
            with connect(
                ws, additional_headers={"Authorization": f"Bearer {token}"}, open_timeout=PROBE_ANSWER_SECONDS
            ) as tunnel:
                tunnel.send(b"GET / HTTP/1.0\r\nHost: localhost\r\n\r\n")
                answer = tunnel.recv(timeout=PROBE_ANSWER_SECONDS)
                if not (isinstance(answer, bytes) and answer.startswith(b"HTTP/1.0 200")):
                    failure = f"answered {answer[:40]!r}"
        except (WebSocketException, OSError, TimeoutError) as exc:
            failure = f"{type(exc).__name__}: {exc}"
        watch.tried(began, failure)
        stopping.wait(0.25)


def watch_app(url: str, watch: Watch, stopping: threading.Event) -> None:
    """A browser tab with the workspace's app open, reloading it: every answer through the proxy must be the
    app's own."""
    with httpx.Client(timeout=30) as client:
        while not stopping.is_set():
            began, failure = time.monotonic(), ""
            try:
                reply = client.get(url)
                if reply.status_code != 200:
                    said = " ".join(re.sub(r"<[^>]+>", " ", reply.text).split())
                    failure = f"{reply.status_code} {said[said.find('not reachable') :][:300]}"
            except httpx.TransportError as exc:
                failure = f"{type(exc).__name__}: {exc}"
            watch.tried(began, failure)
            stopping.wait(0.25)


def hold_ssh(env: dict[str, str], workspace: str, session: SSHSession, stopping: threading.Event) -> None:
    """A person's `slipway ssh` session, held open; when it ends, they connect again at once."""
    ended_at: float | None = None
    while not stopping.is_set():
        with subprocess.Popen(
            [SLIPWAY, "ssh", workspace, "echo up; exec sleep 100000"],
            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        ) as process:  # fmt: skip
            assert process.stdout is not None and process.stderr is not None
            first = process.stdout.readline()
            if first.strip() == "up":
                if ended_at is not None:
                    session.back_seconds.append(time.monotonic() - ended_at)
                session.up.set()
                while process.poll() is None and not stopping.is_set():
                    stopping.wait(0.2)
            if process.poll() is None:
                process.terminate()
            said = (first + process.stderr.read()).strip()[-300:]
            process.wait(timeout=60)
        if stopping.is_set():
            return
        ended_at = time.monotonic()
        session.ends.append((process.returncode, said))


@dataclass
class HeldOpen:
    """A workspace in use during the roll: its agent probed, its app open, an SSH session held."""

    agent: Watch = field(default_factory=Watch)
    app: Watch = field(default_factory=Watch)
    ssh: SSHSession = field(default_factory=SSHSession)
    threads: list[threading.Thread] = field(default_factory=list)
    stopping: threading.Event = field(default_factory=threading.Event)

    def stop(self) -> None:
        self.stopping.set()
        for thread in self.threads:
            thread.join(timeout=90)


def rolling_restart(replicas: list[Replica], log: Callable[[str], None]) -> list[float]:
    """SIGTERM one replica, wait for it to stop, start it, and go on once it is ready; returns each one's time away
    (and logs how much of it was stopping: the drain period, then what its web server still held)."""
    away = []
    for replica in replicas:
        began = time.monotonic()
        assert replica.server.process is not None
        replica.server.process.send_signal(signal.SIGTERM)
        code = replica.server.process.wait(timeout=120)
        stopped = time.monotonic() - began
        replica.start()  # returns once /healthz answers 200
        away.append(time.monotonic() - began)
        log(f"replica {replica.index} restarted (exit {code}) in {away[-1]:.1f} s, {stopped:.1f} s of it stopping")
    return away


@dataclass
class RollingDeployment:
    root: Path
    url: str = ""
    token: str = ""
    template_id: str = ""
    replicas: list[Replica] = field(default_factory=list)
    daemons: list[DaemonProcess] = field(default_factory=list)
    stopping: threading.Event = field(default_factory=threading.Event)

    def admin(self) -> httpx.Client:
        return httpx.Client(
            base_url=f"{self.url}/api/v2", headers={"Authorization": f"Bearer {self.token}"}, timeout=60
        )

    def start_builds(self, count: int, prefix: str) -> list[dict[str, Any]]:
        """``count`` workspaces, each with its first build under way: their latest builds."""
        with self.admin() as admin:
            made = []
            for number in range(count):
                reply = admin.post("/workspaces", json={"template_id": self.template_id, "name": f"{prefix}-{number}"})
                assert reply.status_code == 201, reply.text
                made.append(reply.json()["latest_build"])
            return made

    def follow(self, builds: list[dict[str, Any]], viewers: int) -> tuple[list[Follower], list[threading.Thread]]:
        """Viewers spread over the builds, each following its log until the build ends; returns once every stream
        has its first lines."""
        followers = [Follower(builds[n % len(builds)]["id"]) for n in range(viewers)]
        threads = [
            threading.Thread(target=follow, args=(self.url, self.token, f, self.stopping), daemon=True)
            for f in followers
        ]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 300
        while not all(len(f.ids) >= 5 for f in followers):
            if time.monotonic() > deadline:
                raise AssertionError("the builds' logs did not start within 5 minutes")
            time.sleep(0.2)
        return followers, threads

    def finish(
        self, builds: list[dict[str, Any]], threads: list[threading.Thread]
    ) -> tuple[list[dict[str, Any]], dict[str, list[int]]]:
        """Wait for the builds and their viewers; returns the jobs and each build's stored log line ids."""
        with self.admin() as admin:
            outcomes = [wait_job(admin, build["job"]["id"], TERMINAL, timeout=600) for build in builds]
            for thread in threads:
                thread.join(timeout=120)
            stored = {
                build["id"]: [int(line["id"]) for line in admin.get(f"/workspacebuilds/{build['id']}/logs").json()]
                for build in builds
            }
        return outcomes, stored

    def cli_env(self) -> dict[str, str]:
        env = {key: value for key, value in os.environ.items() if not key.startswith("SLIPWAY_")}
        env.update(SLIPWAY_URL=self.url, SLIPWAY_SESSION_TOKEN=self.token, XDG_CONFIG_HOME=str(self.root / "cli"))
        return env

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        done: subprocess.CompletedProcess[str] = run_cli(*args, env=self.cli_env(), timeout=300)
        assert done.returncode == 0, f"slipway {' '.join(args)}: {done.stdout}{done.stderr}"
        return done

    def hold_workspace_open(self, name: str = "held") -> HeldOpen:
        """A workspace of examples/local (its agent reaching the server through the proxy) with a dev server
        running, then: a probe of its agent, its app open, and an SSH session held, all through the proxy."""
        port = _free_port()
        self.cli("templates", "push", "local", "-d", str(EXAMPLE), "--variable", f"workspaces_root={self.workspaces}")
        self.cli("create", name, "-t", "local", "-p", f"dev_port={port}", "-p", "dev_share=public")
        with self.admin() as admin:
            agent: dict[str, Any] = {}
            deadline = time.monotonic() + 300
            while not (agent.get("status") == "connected" and agent.get("lifecycle_state") == "ready"):
                assert time.monotonic() < deadline, f"the agent of {name} was not ready in 5 minutes: {agent}"
                time.sleep(0.5)
                found = admin.get("/workspaces", params={"owner": "me", "name": name}).json()
                resources = found[0]["latest_build"]["resources"] if found else []
                agents = [one for resource in resources for one in resource["agents"]]
                agent = agents[0] if agents else {}
        serve = f"nohup {sys.executable} -m http.server --bind 127.0.0.1 {port} > dev.log 2>&1 < /dev/null &"
        self.cli("ssh", name, serve)
        held = HeldOpen()
        app = f"{self.url}/@alice/{name}.main/apps/dev/"
        held.threads = [
            threading.Thread(target=probe_agent, args=(self.url, self.token, agent["id"], port, held.agent,
                                                       held.stopping), daemon=True),
            threading.Thread(target=watch_app, args=(app, held.app, held.stopping), daemon=True),
            threading.Thread(target=hold_ssh, args=(self.cli_env(), name, held.ssh, held.stopping), daemon=True),
        ]  # fmt: skip
        for thread in held.threads:
            thread.start()
        deadline = time.monotonic() + 120
        while not (held.ssh.up.is_set() and held.app.answered and held.agent.answered):
            assert time.monotonic() < deadline, f"the held workspace did not answer: {held}"
            time.sleep(0.2)
        # The dev server starts in the background: what failed before it listened is not the roll's doing.
        held.agent.reset()
        held.app.reset()
        return held

    @property
    def workspaces(self) -> Path:
        return self.root / "workspaces"

    def proxied(self) -> list[list[str]]:
        """nginx's access log, one list a request: status, upstream statuses, upstream addresses, method, path."""
        return [line.split() for line in (self.root / "nginx-access.log").read_text().splitlines() if line]


def lost_and_repeated(followers: list[Follower], stored: dict[str, list[int]], lines: int) -> tuple[int, int, int]:
    """Lines a viewer never got, lines it got twice, and viewers whose numbered lines were not 1..lines in order."""
    lost = sum(len(set(stored[f.build_id]) - set(f.ids)) for f in followers)
    repeated = sum(len(f.ids) - len(set(f.ids)) for f in followers)
    disordered = sum(1 for f in followers if f.numbers != list(range(1, lines + 1)))
    return lost, repeated, disordered


@contextlib.contextmanager
def rolling_deployment(
    root: Path, cluster: PostgresCluster, *, daemons: int, drain: int, lines: int, pause: float, viewers: int
) -> Iterator[RollingDeployment]:
    plan = SoakPlan(seconds=60, replicas=3, daemons=daemons, builds=1, viewers=viewers, lines_per_build=lines,
                    line_pause=pause)  # fmt: skip
    proxy_port = _free_port()
    database = f"rolling_{int(time.time() * 1000)}"
    cluster.execute(f"CREATE DATABASE {database}")
    (root / "redis").mkdir(parents=True)
    redis = start_embedded_redis(root / "redis")
    env = {
        "SLIPWAY_DATABASE_URL": cluster.url(database),
        "SLIPWAY_REDIS_URL": f"unix://{root / 'redis' / 'redis.sock'}",
        "SLIPWAY_SECRET_KEY": SECRET_KEY,
        "SLIPWAY_PROVISIONER_DAEMON_PSK": DAEMON_PSK,
        "SLIPWAY_DRAIN_PERIOD": str(drain),
        # Every viewer is one person; a killed replica's slots linger until they expire (a minute).
        "SLIPWAY_MAX_LIVE_CONNECTIONS_PER_USER": str(viewers * 4 + 20),
        # Workspaces' agents reach the server through the proxy, as they would a Kubernetes Service.
        "SLIPWAY_ACCESS_URL": f"http://127.0.0.1:{proxy_port}",
    }
    deployment = RollingDeployment(root)
    deployment.replicas = [Replica(index, root / f"replica-{index}", env) for index in range(3)]
    nginx: subprocess.Popen[bytes] | None = None
    try:
        # Together, as a Deployment's pods start: one migrates, the others wait for its lock.
        starters = [threading.Thread(target=replica.start) for replica in deployment.replicas]
        for starter in starters:
            starter.start()
        for starter in starters:
            starter.join(timeout=300)
        nginx, deployment.url = start_nginx(root, [replica.server.port for replica in deployment.replicas], proxy_port)
        url = deployment.url
        account = {"username": "alice", "email": "alice@example.com", "password": PASSWORD}
        assert httpx.post(f"{url}/api/v2/users/first", json=account).status_code == 201
        login = httpx.post(f"{url}/api/v2/users/login", json={"email": account["email"], "password": PASSWORD})
        deployment.token = str(login.json()["session_token"])
        with deployment.admin() as admin:
            for number in range(daemons):
                work = root / f"daemon-{number}"
                work.mkdir()
                daemon = DaemonProcess(url, f"ext-{number}", work, env={"SLIPWAY_PROVISIONER_DAEMON_PSK": DAEMON_PSK})
                deployment.daemons.append(daemon.start())
            for daemon in deployment.daemons:
                daemon.wait_registered(admin, timeout=120)
            version = push_import(admin, files=soak_template(plan, root / "applied"))
            assert wait_job(admin, version["job"]["id"], TERMINAL, timeout=180)["status"] == "succeeded"
            template = admin.post("/templates", json={"name": "rolling", "version_id": version["id"]})
            assert template.status_code == 201, template.text
            deployment.template_id = template.json()["id"]
        yield deployment
    finally:
        deployment.stopping.set()
        stop_workspaces(deployment.workspaces)
        for daemon in deployment.daemons:
            with contextlib.suppress(Exception):
                daemon.stop()
        if nginx is not None:
            nginx.terminate()
            nginx.wait(timeout=30)
        for replica in deployment.replicas:
            with contextlib.suppress(Exception):
                replica.stop()
        stop([redis], grace=5)
