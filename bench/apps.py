"""Apps through Slipway's proxy against the same app reached directly (through `slipway port-forward`).

A real `slipway server` (SQLite, embedded Redis, built-in daemons) with `--wildcard-access-url '*.localhost:PORT'`
and the examples/local template plus a subdomain app on the dev server's port (tests/support/site_template.py). A
small app of ours (HTTP and a WebSocket echo on one port) runs on this machine, which is the local workspace. For
each way in (direct = port-forward, path = /@owner/ws.main/apps/dev/, subdomain = site--main--ws--owner.localhost):

- time to first byte of 200 small GETs on one keep-alive client connection: p50/p99 (signed in: a bearer token
  for the path app, the app host's own cookie from the code exchange for the subdomain app);
- throughput of a 100 MiB download (MiB/s, best of --repeat);
- WebSocket echo round trips of 64 bytes: p50/p99 over 500, after a warm-up.

"straight" is the app on its port with nothing between, for scale.

Targets (issue 35): TTFB overhead <= 5 ms p50, throughput >= 50 % of direct, echo overhead <= 2 ms p50.

    .venv/bin/python bench/apps.py [--requests 200] [--size-mib 100] [--echoes 500] [--repeat 2]
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
from websockets.sync.client import connect

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))
from _harness import OWNER_PASSWORD, Server, free_port, median, percentile, sign_up_owner  # noqa: E402
from tunnel import kill_leftovers, push_template, start_port_forward, stop_process, wait_job  # noqa: E402

from tests.support.daemon_user import daemon_writable_dir  # noqa: E402
from tests.support.site_template import local_with_site_app  # noqa: E402

MIB = 1 << 20
ECHO_BYTES = 64
ECHO_WARMUP = 50
READY_TIMEOUT_SECONDS = 180.0
CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')

# HTTP/1.1 with keep-alive (/small, /big) and a WebSocket echo on one port, as one dev server serves both. The echo
# speaks just enough of RFC 6455 (unfragmented frames) to be measured, with nothing beyond the standard library.
APP = r"""
import base64, hashlib, struct, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

BIG = b"x" * (int(sys.argv[2]) << 20)
GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


class App(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out as written, not 40 ms later (delayed ACK)

    def log_message(self, *args):
        pass

    def do_GET(self):
        if self.headers.get("Upgrade", "").lower() == "websocket":
            return self.echo()
        body = BIG if self.path.startswith("/big") else b"ok " + self.path.encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        view = memoryview(body)
        for start in range(0, len(body), 1 << 20):
            self.wfile.write(view[start : start + (1 << 20)])

    def echo(self):
        accept = base64.b64encode(hashlib.sha1(self.headers["Sec-WebSocket-Key"].encode() + GUID).digest())
        self.send_response(101)
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.send_header("Sec-WebSocket-Accept", accept.decode())
        self.end_headers()
        self.wfile.flush()
        read = self.rfile.read
        while True:
            head = read(2)
            if len(head) < 2:
                break
            opcode, length = head[0] & 0x0F, head[1] & 0x7F
            if length == 126:
                length = struct.unpack("!H", read(2))[0]
            elif length == 127:
                length = struct.unpack("!Q", read(8))[0]
            mask = read(4) if head[1] & 0x80 else b"\0\0\0\0"
            payload = bytes(byte ^ mask[index % 4] for index, byte in enumerate(read(length)))
            size = struct.pack("!B", len(payload)) if len(payload) < 126 else b"\x7e" + struct.pack("!H", len(payload))
            self.wfile.write(bytes([0x80 | opcode]) + size + payload)
            self.wfile.flush()
            if opcode == 8:
                break
        self.close_connection = True


server = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), App)
print("ready", flush=True)
server.serve_forever()
"""


@dataclass
class Way:
    """One way to the app: where requests go, the Host they name and the headers that sign them in."""

    name: str
    base: str  # http://127.0.0.1:PORT/prefix/
    host: str = ""
    headers: dict[str, str] = field(default_factory=dict)

    def client(self) -> httpx.Client:
        headers = dict(self.headers)
        if self.host:
            headers["Host"] = self.host
        return httpx.Client(headers=headers, timeout=120)


@dataclass
class Figures:
    ttfb_ms: list[float] = field(default_factory=list)
    mib_per_second: list[float] = field(default_factory=list)
    echo_ms: list[float] = field(default_factory=list)


def measure_ttfb(way: Way, requests: int) -> list[float]:
    times = []
    with way.client() as client:
        client.get(way.base + "small").raise_for_status()  # the connection (and the tunnel's first dial) warm
        for index in range(requests):
            began = time.perf_counter()
            with client.stream("GET", f"{way.base}small?n={index}") as reply:
                chunks = reply.iter_raw()
                next(chunks)
                times.append((time.perf_counter() - began) * 1000)
                reply.raise_for_status()
                for _ in chunks:  # the rest of the body, so that the connection is reused
                    pass
    return times


def measure_download(way: Way, size_mib: int) -> float:
    with way.client() as client:
        began = time.perf_counter()
        received = 0
        with client.stream("GET", way.base + "big") as reply:
            reply.raise_for_status()
            for chunk in reply.iter_raw(1 << 20):
                received += len(chunk)
        seconds = time.perf_counter() - began
    if received != size_mib * MIB:
        raise RuntimeError(f"{way.name}: received {received} bytes of {size_mib} MiB")
    return size_mib / seconds


def measure_echo(way: Way, echoes: int) -> list[float]:
    address = urlsplit(way.base)
    sock = socket.create_connection((address.hostname or "", address.port or 80), timeout=60)
    uri = f"ws://{way.host or address.netloc}{address.path}"
    headers = {name: value for name, value in way.headers.items()}
    times = []
    with connect(uri, sock=sock, additional_headers=headers, max_size=None) as websocket:
        message = b"e" * ECHO_BYTES
        for index in range(ECHO_WARMUP + echoes):
            began = time.perf_counter()
            websocket.send(message)
            if websocket.recv() != message:
                raise RuntimeError(f"{way.name}: the echo differs")
            if index >= ECHO_WARMUP:
                times.append((time.perf_counter() - began) * 1000)
    return times


def create_workspace(api: httpx.Client, template_id: str, dev_port: int) -> None:
    body = {
        "template_id": template_id,
        "name": "bench",
        "rich_parameter_values": [{"name": "dev_port", "value": str(dev_port)}],
    }
    reply = api.post("/workspaces", json=body)
    reply.raise_for_status()
    workspace_id = reply.json()["id"]
    wait_job(api, f"/workspacebuilds/{reply.json()['latest_build']['id']}", timeout=READY_TIMEOUT_SECONDS)
    deadline = time.monotonic() + READY_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        workspace = api.get(f"/workspaces/{workspace_id}").json()
        agents = [agent for resource in workspace["latest_build"]["resources"] for agent in resource["agents"]]
        if agents and agents[0]["status"] == "connected" and agents[0]["lifecycle_state"] == "ready":
            return
        time.sleep(0.1)
    raise RuntimeError("the workspace's agent never became ready")


def app_host_cookie(url: str, app_host: str) -> str:
    """Sign in as a browser would (the login form), then trade a one-time code on the app host for its cookie."""
    with httpx.Client(base_url=url, timeout=60) as browser:
        token = CSRF.search(browser.get("/login").text)
        assert token is not None, "no CSRF token on /login"
        signed_in = browser.post(
            "/login", data={"email": "a@example.com", "password": OWNER_PASSWORD, "csrf_token": token.group(1)}
        )
        assert signed_in.status_code == 302, signed_in.text
        back = browser.get("/api/v2/applications/auth-redirect", params={"redirect_uri": f"http://{app_host}/"})
        assert back.status_code == 302, back.text
        code = parse_qs(urlsplit(back.headers["Location"]).query)["slipway_app_code"][0]
    traded = httpx.get(f"{url}/?slipway_app_code={code}", headers={"Host": app_host}, timeout=60)
    assert traded.status_code == 302, traded.text
    return str(traded.cookies["slipway_app_session"])


def start_app(port: int, size_mib: int, scratch: Path) -> subprocess.Popen[bytes]:
    (scratch / "app.py").write_text(APP)
    process = subprocess.Popen(
        [sys.executable, str(scratch / "app.py"), str(port), str(size_mib)],
        stdout=subprocess.PIPE,
        stderr=(scratch / "app.log").open("wb"),
    )
    assert process.stdout is not None
    if process.stdout.readline().strip() != b"ready":
        raise RuntimeError((scratch / "app.log").read_text())
    return process


def report(results: dict[str, Figures], args: argparse.Namespace) -> None:
    direct = results["direct"]
    print(f"\n{'way':<11} {'TTFB p50':>9} {'p99':>8} {'MiB/s':>8} {'echo p50':>9} {'p99':>8}   (ms, best MiB/s)")
    for name, figures in results.items():
        ttfb, echo = figures.ttfb_ms, figures.echo_ms
        print(
            f"{name:<11} {median(ttfb):>9.2f} {percentile(ttfb, 0.99):>8.2f} {max(figures.mib_per_second):>8.1f} "
            f"{median(echo):>9.2f} {percentile(echo, 0.99):>8.2f}"
        )
    print("\nagainst direct (port-forward), targets: TTFB +<=5 ms p50, throughput >=50 %, echo +<=2 ms p50")
    for name, figures in results.items():
        if name in ("direct", "straight"):
            continue
        ttfb = median(figures.ttfb_ms) - median(direct.ttfb_ms)
        share = max(figures.mib_per_second) / max(direct.mib_per_second) * 100
        echo = median(figures.echo_ms) - median(direct.echo_ms)
        print(f"  {name:<10} TTFB {ttfb:+.2f} ms, throughput {share:.0f} %, echo {echo:+.2f} ms")
    print(f"  ({args.requests} requests, {args.size_mib} MiB x {args.repeat}, {args.echoes} echoes of {ECHO_BYTES} B)")


def run(args: argparse.Namespace, scratch: Path) -> None:
    port = free_port()
    wildcard = f"*.localhost:{port}"
    server = Server(extra_args=("--provisioner-daemons", "2", "--wildcard-access-url", wildcard), port=port)
    # Writable by the built-in daemons' user (when this runs as root they run as another).
    workspaces_root = daemon_writable_dir("bench-workspaces")
    forwarder = app = None
    try:
        server.start()
        load = " ".join(f"{value:.2f}" for value in os.getloadavg())
        print(f"apps: {os.cpu_count()} cores ({platform.machine()}, {platform.system()}), load {load} at start")
        api, token = sign_up_owner(server.url)
        template_id = push_template(api, workspaces_root, local_with_site_app(scratch / "template"))
        dev_port = free_port()
        create_workspace(api, template_id, dev_port)
        app = start_app(dev_port, args.size_mib, scratch)
        forwarder, local_port = start_port_forward(server.url, token, "bench", dev_port, scratch)
        app_host = f"site--main--bench--alice.localhost:{port}"
        cookie = app_host_cookie(server.url, app_host)
        ways = [
            Way("straight", f"http://127.0.0.1:{dev_port}/"),  # no Slipway at all: the local workspace is here
            Way("direct", f"http://127.0.0.1:{local_port}/"),
            Way("path", f"{server.url}/@alice/bench.main/apps/dev/", headers={"Authorization": f"Bearer {token}"}),
            Way("subdomain", f"{server.url}/", host=app_host, headers={"Cookie": f"slipway_app_session={cookie}"}),
        ]
        results = {way.name: Figures() for way in ways}
        for repetition in range(args.repeat):  # interleaved: the machine's noise hits every way alike
            for way in ways:
                figures = results[way.name]
                figures.ttfb_ms += measure_ttfb(way, args.requests)
                figures.mib_per_second.append(measure_download(way, args.size_mib))
                figures.echo_ms += measure_echo(way, args.echoes)
            print(f"  repetition {repetition + 1}/{args.repeat} done")
        report(results, args)
        print(f"load {' '.join(f'{value:.2f}' for value in os.getloadavg())} at the end")
    finally:
        stop_process(forwarder)
        stop_process(app)
        kill_leftovers(workspaces_root)
        server.stop()
        failures = (scratch / "port-forward.log").read_text().strip() if (scratch / "port-forward.log").exists() else ""
        if failures:
            print(f"port-forward reported:\n{textwrap.indent(failures, '  ')}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--size-mib", type=int, default=100)
    parser.add_argument("--echoes", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="slipway-apps-bench-") as scratch:
        run(args, Path(scratch))


if __name__ == "__main__":
    main()
