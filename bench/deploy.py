"""Deployment figures, one section each; this file holds the rolling restart's (another section adds the image's).

Rolling restart: 3 web replicas on one PostgreSQL and one Redis behind nginx (Debian's), each with a drain period;
external daemons reach the servers through nginx, as do the viewers. Builds print numbered lines slowly while
viewers follow their logs over SSE, resuming after the last event id when a stream ends (as EventSource does). The
replicas are then restarted one at a time as Kubernetes rolls a Deployment: SIGTERM, wait until it has stopped,
start it again, and the next only once it answers /healthz. Printed: each viewer's time back after its stream ended
(p50, p99; target p99 <= 5 s), log lines lost or received twice (target 0), builds that did not succeed, and the
5xx answers nginx gave. Exits 1 when a line was lost or repeated or a build failed.

    .venv/bin/python bench/deploy.py [--builds 6] [--viewers 24] [--drain 3]
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.server.embedded_redis import start_embedded_redis
from app.server.processes import stop
from tests.support.postgres import PostgresCluster
from tests.support.provisionerd import DAEMON_PSK, DaemonProcess, push_import, wait_job
from tests.support.soak import (
    NUMBERED_LINE,
    PASSWORD,
    SECRET_KEY,
    TERMINAL,
    Replica,
    SoakPlan,
    percentile,
    soak_template,
)
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
    upstream slipway {{
{servers}
        keepalive 32;
    }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://slipway;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host $http_host;
            proxy_set_header X-Forwarded-For $remote_addr;
            # Live streams: no buffering, and longer than a heartbeat's silence.
            proxy_buffering off;
            proxy_read_timeout 120s;
            # A replica that is gone refuses the connection: the request goes to the next one.
            proxy_next_upstream error timeout http_502;
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


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def start_nginx(root: Path, ports: list[int]) -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
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


def rolling_restart(replicas: list[Replica], log: Any) -> list[float]:
    """SIGTERM one replica, wait for it to stop, start it, and go on once it is ready; returns each one's time away."""
    away = []
    for replica in replicas:
        began = time.monotonic()
        assert replica.server.process is not None
        replica.server.process.send_signal(signal.SIGTERM)
        code = replica.server.process.wait(timeout=120)
        replica.start()  # returns once /healthz answers 200
        away.append(time.monotonic() - began)
        log(f"replica {replica.index} restarted (exit {code}) in {away[-1]:.1f} s")
    return away


def rolling_restart_figures(builds: int, viewers: int, drain: int, lines: int, pause: float) -> tuple[list[str], bool]:
    began = time.monotonic()

    def log(line: str) -> None:
        print(f"[{time.monotonic() - began:6.1f} s] {line}", flush=True)

    root = Path(tempfile.mkdtemp(prefix="slipway-rolling-"))
    plan = SoakPlan(seconds=60, replicas=3, daemons=builds, builds=builds, viewers=viewers, lines_per_build=lines,
                    line_pause=pause)  # fmt: skip
    cluster = PostgresCluster()
    cluster.start()
    cluster.execute("CREATE DATABASE rolling")
    (root / "redis").mkdir()
    redis = start_embedded_redis(root / "redis")
    env = {
        "SLIPWAY_DATABASE_URL": cluster.url("rolling"),
        "SLIPWAY_REDIS_URL": f"unix://{root / 'redis' / 'redis.sock'}",
        "SLIPWAY_SECRET_KEY": SECRET_KEY,
        "SLIPWAY_PROVISIONER_DAEMON_PSK": DAEMON_PSK,
        "SLIPWAY_DRAIN_PERIOD": str(drain),
        "SLIPWAY_MAX_LIVE_CONNECTIONS_PER_USER": str(viewers * 4 + 20),
    }
    replicas = [Replica(index, root / f"replica-{index}", env) for index in range(3)]
    daemons: list[DaemonProcess] = []
    nginx: subprocess.Popen[bytes] | None = None
    stopping = threading.Event()
    try:
        for replica in replicas:
            replica.start()
        nginx, url = start_nginx(root, [replica.server.port for replica in replicas])
        log(f"3 replicas behind nginx at {url}")
        account = {"username": "alice", "email": "alice@example.com", "password": PASSWORD}
        assert httpx.post(f"{url}/api/v2/users/first", json=account).status_code == 201
        login = httpx.post(f"{url}/api/v2/users/login", json={"email": account["email"], "password": PASSWORD})
        token = str(login.json()["session_token"])
        admin = httpx.Client(base_url=f"{url}/api/v2", headers={"Authorization": f"Bearer {token}"}, timeout=60)
        for number in range(builds):
            work = root / f"daemon-{number}"
            work.mkdir()
            daemons.append(
                DaemonProcess(url, f"ext-{number}", work, env={"SLIPWAY_PROVISIONER_DAEMON_PSK": DAEMON_PSK}).start()
            )
        for daemon in daemons:
            daemon.wait_registered(admin, timeout=120)
        version = push_import(admin, files=soak_template(plan, root / "applied"))
        assert wait_job(admin, version["job"]["id"], TERMINAL, timeout=180)["status"] == "succeeded"
        template = admin.post("/templates", json={"name": "rolling", "version_id": version["id"]}).json()
        made = [
            admin.post("/workspaces", json={"template_id": template["id"], "name": f"rolling-{n}"}).json()
            for n in range(builds)
        ]
        jobs = [workspace["latest_build"]["job"]["id"] for workspace in made]
        followers = [Follower(made[n % builds]["latest_build"]["id"]) for n in range(viewers)]
        threads = [threading.Thread(target=follow, args=(url, token, f, stopping), daemon=True) for f in followers]
        for thread in threads:
            thread.start()
        log(f"{builds} builds of {lines} lines ({pause * 1000:.0f} ms apart), {viewers} viewers following")
        under_way = time.monotonic() + 300
        while not all(len(f.ids) >= 5 for f in followers):  # every stream under way
            if time.monotonic() > under_way:
                raise RuntimeError("the builds' logs did not start within 5 minutes")
            time.sleep(0.2)
        away = rolling_restart(replicas, log)
        outcomes = [wait_job(admin, job, TERMINAL, timeout=600) for job in jobs]
        for thread in threads:
            thread.join(timeout=120)
        stored = {
            workspace["latest_build"]["id"]: [
                int(line["id"]) for line in admin.get(f"/workspacebuilds/{workspace['latest_build']['id']}/logs").json()
            ]
            for workspace in made
        }
        admin.close()
    finally:
        stopping.set()
        for daemon in daemons:
            with contextlib.suppress(Exception):
                daemon.stop()
        if nginx is not None:
            nginx.terminate()
            nginx.wait(timeout=30)
        for replica in replicas:
            with contextlib.suppress(Exception):
                replica.stop()
        stop([redis], grace=5)
        cluster.stop()

    return summarise(followers, stored, outcomes, away, root, drain, lines)


def summarise(
    followers: list[Follower],
    stored: dict[str, list[int]],
    outcomes: list[dict[str, Any]],
    away: list[float],
    root: Path,
    drain: int,
    lines: int,
) -> tuple[list[str], bool]:
    lost = sum(len(set(stored[f.build_id]) - set(f.ids)) for f in followers)
    repeated = sum(len(f.ids) - len(set(f.ids)) for f in followers)
    gaps = sum(1 for f in followers if f.numbers != list(range(1, lines + 1)))
    back = [seconds for f in followers for seconds in f.back_seconds]
    failed = [o for o in outcomes if o["status"] != "succeeded"]
    proxied = [line.split() for line in (root / "nginx-access.log").read_text().splitlines()]
    errors = [fields for fields in proxied if fields and fields[0].startswith("5")]
    figures = [
        f"rolling restart of 3 replicas (drain {drain} s) behind nginx: each away for "
        + ", ".join(f"{seconds:.1f} s" for seconds in away),
        f"followed log streams back after their replica went: {len(back)} reconnections, "
        f"p50 {percentile(back, 0.5):.2f} s, p99 {percentile(back, 0.99):.2f} s (target p99 <= 5 s)",
        f"log lines lost: {lost}, received twice: {repeated}, viewers whose numbered lines were not 1..{lines} in "
        f"order: {gaps} (targets 0)",
        f"builds: {len(outcomes) - len(failed)} succeeded, {len(failed)} did not",
        f"nginx: {len(proxied)} requests, {len(errors)} answered 5xx"
        + (": " + "; ".join(" ".join(fields) for fields in errors[:5]) if errors else ""),
        f"viewers refused on reconnect: {sorted({s for f in followers for s in f.refused})}",
    ]
    clean = lost == 0 and repeated == 0 and gaps == 0 and not failed
    if clean:
        shutil.rmtree(root, ignore_errors=True)
    else:
        figures.append(f"logs kept in {root}")
    return figures, clean


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--builds", type=int, default=6, help="builds (and external daemons) under way")
    parser.add_argument("--viewers", type=int, default=24, help="log streams followed, spread over the builds")
    parser.add_argument("--drain", type=int, default=3, help="each replica's --drain-period, seconds")
    parser.add_argument("--lines", type=int, default=1200, help="numbered lines each build prints")
    parser.add_argument("--line-pause", type=float, default=0.1, help="seconds between two of them")
    args = parser.parse_args()
    figures, clean = rolling_restart_figures(args.builds, args.viewers, args.drain, args.lines, args.line_pause)
    print("\n".join(figures))
    return 0 if clean else 1


if __name__ == "__main__":
    sys.exit(main())
