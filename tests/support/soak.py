"""Two (or more) web replicas on one PostgreSQL and one Redis, under builds and live log viewers, with one replica
killed -9 (with its children) and started again on its port mid-run: the machinery behind `bench/soak.py`, which
prints the figures, and `tests/test_soak.py`, which runs it small and asserts the behaviour.

Each build of the soak template prints numbered lines (``line-1`` ... ``line-N``) a little apart, and appends its
build id to a file shared by every daemon, so the end can tell whether any build ran twice. Viewers follow a
build's log over SSE from a replica and, when the connection drops, come back to a random replica after the last
event id they saw, as a browser's EventSource does.
"""

from __future__ import annotations

import contextlib
import math
import random
import re
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import psutil

from app.server.embedded_redis import start_embedded_redis
from app.server.processes import stop
from tests.support.postgres import PostgresCluster
from tests.support.provisionerd import DAEMON_PSK, DaemonProcess, push_import, wait_job
from tests.support.server import ServerProcess
from tests.support.sse import events

PASSWORD = "correct-horse-battery"
SECRET_KEY = "soak-shared-secret-key"
TERMINAL = ("succeeded", "failed", "canceled")
# A job that stopped short of its end, waiting for a person: the next build of its workspace would wait for ever.
STALLED = "awaiting_confirmation"
# What the server's `retry:` hint asks of EventSource (app/core/limits.py RECONNECT_MILLISECONDS).
RECONNECT_SECONDS = 1.0
# Terraform prefixes what a local-exec prints with the resource's address.
NUMBERED_LINE = re.compile(r"\(local-exec\): line-(\d+)$")
# A steady reader of the API beside the load (a dashboard's workspace list), alternating replicas.
PROBE_SECONDS = 0.5
# A build's transitions in turn: its workspace is created (start), stopped, started and stopped again.
TRANSITIONS = ("start", "stop", "start", "stop")


@dataclass(frozen=True)
class SoakPlan:
    seconds: float = 600.0  # over which the builds are started; the run then waits for the last ones to end
    replicas: int = 2
    daemons: int = 10
    builds: int = 200
    viewers: int = 200
    lines_per_build: int = 100
    line_pause: float = 0.05
    killed_replica: int = 0
    kill_at: float | None = None  # seconds into the run; None: half way
    seed: int = 1

    @property
    def kill_after(self) -> float:
        return self.seconds / 2 if self.kill_at is None else self.kill_at

    @property
    def workspaces(self) -> int:
        return math.ceil(self.builds / len(TRANSITIONS))


def soak_template(plan: SoakPlan, runs_file: Path) -> dict[str, str]:
    """A start creates the resource and a stop destroys it (a resource kept across a stop would be persistent, and
    replacing it would wait for a person's confirmation): each runs a local-exec that notes its build id, then
    prints the numbered lines. printf, so that Terraform's echo of the command matches no numbered line."""
    command = (
        f'echo \\"$CODER_WORKSPACE_BUILD_ID\\" >> {runs_file}; '
        f"for i in $(seq 1 {plan.lines_per_build}); do printf 'line-%s\\\\n' $i; sleep {plan.line_pause}; done"
    )
    return {
        "main.tf": (
            'terraform {\n  required_providers {\n    coder = { source = "coder/coder" }\n  }\n}\n'
            'data "coder_workspace" "me" {}\n'
            'resource "terraform_data" "numbered" {\n'
            "  count = data.coder_workspace.me.start_count\n"
            f'  provisioner "local-exec" {{\n    command = "{command}"\n  }}\n'
            f'  provisioner "local-exec" {{\n    when = destroy\n    command = "{command}"\n  }}\n'
            "}\n"
        )
    }


class Replica:
    """One `slipway server` that can be killed outright (it and every process it started, at once) and started
    again on the same port; its resident memory is sampled across both lives."""

    def __init__(self, index: int, data_dir: Path, env: dict[str, str]) -> None:
        self.index = index
        self.server = ServerProcess(data_dir, "--provisioner-daemons", "0", env=env, start_timeout=180)
        self.peak_rss_mb = 0.0
        self.lives = 0

    @property
    def url(self) -> str:
        return self.server.url

    def start(self) -> None:
        if self.server.log_path.exists():  # keep the first life's log: start() writes a new one
            self.server.log_path.rename(self.server.log_path.with_suffix(f".life{self.lives}.log"))
        self.server.start(timeout=180)
        self.lives += 1

    def kill(self) -> None:
        """kill -9 of the whole tree: stopped first, so that no child outlives the server long enough to notice
        (children carry a parent-death SIGTERM, which would let them stop gracefully)."""
        assert self.server.process is not None
        tree = [psutil.Process(self.server.process.pid), *self.server.tree()]
        for process in tree:
            with contextlib.suppress(psutil.Error):
                process.send_signal(signal.SIGSTOP)
        for process in tree:
            with contextlib.suppress(psutil.Error):
                process.kill()
        self.server.process.wait(timeout=30)
        psutil.wait_procs(tree, timeout=30)

    def sample_rss(self) -> None:
        process = self.server.process
        if process is None or process.poll() is not None:
            return
        with contextlib.suppress(psutil.Error):
            root = psutil.Process(process.pid)
            total = 0
            for member in [root, *root.children(recursive=True)]:
                with contextlib.suppress(psutil.Error):
                    total += member.memory_info().rss
            self.peak_rss_mb = max(self.peak_rss_mb, total / 1e6)

    def stop(self) -> None:
        if self.server.process is not None and self.server.process.poll() is None:
            self.server.stop(timeout=60)


class AmbiguousRequest(Exception):
    """The request went out and the connection broke before an answer: it may or may not have been done."""


@dataclass
class ApiCall:
    at: float  # monotonic, when it began
    replica: int
    seconds: float
    status: int  # 0: no answer
    what: str  # method and path


class Api:
    """The API of every replica behind one door, as a load balancer would give it: a request goes to the replica
    asked for and, when that one refuses the connection, to the next. Every call is timed."""

    def __init__(self, replicas: list[Replica], token: str) -> None:
        self.replicas = replicas
        self.clients = [
            httpx.Client(base_url=f"{replica.url}/api/v2", headers={"Authorization": f"Bearer {token}"}, timeout=60)
            for replica in replicas
        ]
        self.calls: list[ApiCall] = []
        self.failovers = 0
        self._lock = threading.Lock()

    def request(self, method: str, path: str, replica: int, json: Any = None, params: Any = None) -> httpx.Response:
        for attempt in range(len(self.clients) * 3):
            index = (replica + attempt) % len(self.clients)
            began = time.monotonic()
            try:
                response = self.clients[index].request(method, path, json=json, params=params)
            except httpx.ConnectError:  # nothing was sent: another replica takes it
                self._note(ApiCall(began, index, time.monotonic() - began, 0, f"{method} {path}"), failover=True)
                if attempt % len(self.clients) == len(self.clients) - 1:
                    time.sleep(RECONNECT_SECONDS)  # every replica refused: give them a moment
                continue
            except httpx.TransportError as exc:
                self._note(ApiCall(began, index, time.monotonic() - began, 0, f"{method} {path}"), failover=True)
                if method == "GET":
                    continue
                raise AmbiguousRequest(f"{method} {path} on replica {index}: {exc!r}") from exc
            self._note(ApiCall(began, index, time.monotonic() - began, response.status_code, f"{method} {path}"))
            return response
        raise ConnectionError(f"no replica answered {method} {path}")

    def get(self, path: str, replica: int = 0, **params: str) -> Any:
        response = self.request("GET", path, replica, params=params or None)
        assert response.status_code == 200, f"GET {path}: {response.status_code} {response.text}"
        return response.json()

    def _note(self, call: ApiCall, *, failover: bool = False) -> None:
        with self._lock:
            self.calls.append(call)
            self.failovers += failover

    def close(self) -> None:
        for client in self.clients:
            client.close()


@dataclass
class Build:
    number: int
    workspace: int
    transition: str
    replica: int  # the replica it was asked of
    created: threading.Event = field(default_factory=threading.Event)
    build_id: str = ""
    job_id: str = ""
    ambiguous_requests: int = 0
    job: dict[str, Any] = field(default_factory=dict)  # the job as it ended
    stored_ids: list[int] = field(default_factory=list)  # its log lines' ids, read at the end


@dataclass
class ViewerResult:
    number: int
    build: int
    ids: list[int] = field(default_factory=list)
    numbers: list[int] = field(default_factory=list)  # of the numbered lines, in the order received
    connections: int = 0
    dropped: int = 0  # connections that broke before the end event
    refused: list[int] = field(default_factory=list)  # statuses of connections answered with anything but 200
    end_status: str = ""
    problems: list[str] = field(default_factory=list)


@dataclass
class SoakReport:
    plan: SoakPlan
    builds: list[Build]
    viewers: list[ViewerResult]
    api_calls: list[ApiCall]
    failovers: int
    runs: list[str]  # the build ids the template noted, one per apply
    began: float  # monotonic, when the run began
    killed_at: float  # seconds into the run
    downtime_seconds: float
    outage: tuple[datetime, datetime]  # wall clock: killed, answering again
    running_at_kill: int  # builds whose job was running when the replica was killed
    peak_rss_mb: list[float]
    wall_seconds: float
    daemon_logs: dict[str, str]
    errors: list[str]  # what went wrong in the soak's own threads (an unexpected answer, say)

    def problems(self) -> list[str]:
        """Every correctness failure found, one line each (empty: the run was clean)."""
        found = list(self.errors)
        for build in self.builds:
            status = build.job.get("status", "never created")
            if status != "succeeded":
                found.append(f"build {build.number} ({build.transition}, job {build.job_id}): {status} "
                             f"{build.job.get('error', '')}".rstrip())  # fmt: skip
        counts: dict[str, int] = {}
        for build_id in self.runs:
            counts[build_id] = counts.get(build_id, 0) + 1
        found += [f"build {build_id} was applied {count} times" for build_id, count in counts.items() if count > 1]
        by_id = {build.build_id: build for build in self.builds}
        found += [f"build {build.number} never ran its apply" for build in self.builds
                  if build.job.get("status") == "succeeded" and build.build_id not in counts]  # fmt: skip
        found += [f"an apply noted build id {build_id!r}, which the soak never asked for"
                  for build_id in counts if build_id not in by_id]  # fmt: skip
        for viewer in self.viewers:
            found += [f"viewer {viewer.number} (build {viewer.build}): {problem}" for problem in viewer.problems]
        return found


def check_viewer(viewer: ViewerResult, build: Build, lines_per_build: int) -> None:
    """Every line of its build exactly once, in order: its ids are the stored ones, its numbered lines 1..N."""
    if viewer.end_status != build.job.get("status"):
        viewer.problems.append(f"ended on {viewer.end_status or 'no end event'!r}, the job {build.job.get('status')}")
    duplicates = len(viewer.ids) - len(set(viewer.ids))
    if duplicates:
        viewer.problems.append(f"{duplicates} line(s) received twice")
    if viewer.ids != build.stored_ids:
        missing = sorted(set(build.stored_ids) - set(viewer.ids))
        extra = sorted(set(viewer.ids) - set(build.stored_ids))
        if missing or extra or not duplicates:
            viewer.problems.append(
                f"received {len(viewer.ids)} lines, {len(build.stored_ids)} stored; missing ids {missing[:5]}"
                f"{'...' if len(missing) > 5 else ''}, unknown ids {extra[:5]}, out of order: "
                f"{viewer.ids != sorted(viewer.ids)}"
            )
    if viewer.numbers != list(range(1, lines_per_build + 1)):
        viewer.problems.append(f"numbered lines {_ranges(viewer.numbers)}, not 1-{lines_per_build} once each")


def _ranges(numbers: list[int]) -> str:
    """1,2,3,5,5,6 -> '1-3,5,5-6': a received sequence, short."""
    parts: list[str] = []
    start = previous = None
    for number in [*numbers, None]:
        if start is not None and number is not None and previous is not None and number == previous + 1:
            previous = number
            continue
        if start is not None:
            parts.append(str(start) if start == previous else f"{start}-{previous}")
        start = previous = number
    return ",".join(parts) or "none"


class Soak:
    """One run: the processes, the load, the kill and restart, and what was seen."""

    def __init__(self, plan: SoakPlan, root: Path, cluster: PostgresCluster) -> None:
        self.plan = plan
        self.root = root
        self.cluster = cluster
        self.random = random.Random(plan.seed)
        self.stopping = threading.Event()
        self.replicas: list[Replica] = []
        self.daemons: list[DaemonProcess] = []
        self.redis: Any = None
        self.runs_file = root / "applied-builds"
        self.builds = [
            Build(number, number % plan.workspaces, TRANSITIONS[number // plan.workspaces % len(TRANSITIONS)],
                  number % plan.replicas)
            for number in range(plan.builds)
        ]  # fmt: skip
        self.viewers = [ViewerResult(number, number % plan.builds) for number in range(plan.viewers)]
        self.token = ""
        self.template_id = ""
        self.errors: list[str] = []

    # -- setting up --------------------------------------------------------------------------------------------

    def start(self) -> None:
        plan = self.plan
        database = f"soak_{int(time.time())}_{self.random.randrange(1 << 30)}"
        self.cluster.execute(f"CREATE DATABASE {database}")
        redis_dir = self.root / "redis"
        redis_dir.mkdir(parents=True)
        self.redis = start_embedded_redis(redis_dir)
        env = {
            "SLIPWAY_DATABASE_URL": self.cluster.url(database),
            "SLIPWAY_REDIS_URL": f"unix://{redis_dir / 'redis.sock'}",
            "SLIPWAY_SECRET_KEY": SECRET_KEY,
            "SLIPWAY_PROVISIONER_DAEMON_PSK": DAEMON_PSK,
            # Every viewer is one person; a killed replica's slots linger until they expire (a minute).
            "SLIPWAY_MAX_LIVE_CONNECTIONS_PER_USER": str(plan.viewers * 2 + 20),
        }
        self.replicas = [Replica(index, self.root / f"replica-{index}", env) for index in range(plan.replicas)]
        # One after the other, as a rolling deployment does: each runs the migrations before it serves.
        for replica in self.replicas:
            replica.start()
        first = self.replicas[0].url
        account = {"username": "alice", "email": "alice@example.com", "password": PASSWORD}
        assert httpx.post(f"{first}/api/v2/users/first", json=account).status_code == 201
        login = httpx.post(f"{first}/api/v2/users/login", json={"email": account["email"], "password": PASSWORD})
        self.token = str(login.json()["session_token"])
        with self._admin(0) as admin:
            for number in range(plan.daemons):
                work = self.root / f"daemon-{number}"
                work.mkdir()
                replica = self.replicas[number % plan.replicas]
                daemon = DaemonProcess(
                    replica.url, f"soak-{number}", work, env={"SLIPWAY_PROVISIONER_DAEMON_PSK": DAEMON_PSK}
                )
                self.daemons.append(daemon.start())
            for daemon in self.daemons:
                daemon.wait_registered(admin, timeout=120)
            version = push_import(admin, files=soak_template(plan, self.runs_file))
            imported = wait_job(admin, version["job"]["id"], TERMINAL, timeout=180)
            assert imported["status"] == "succeeded", imported
            template = admin.post("/templates", json={"name": "soak", "version_id": version["id"]})
            assert template.status_code == 201, template.text
            self.template_id = template.json()["id"]

    def _admin(self, replica: int) -> httpx.Client:
        auth = {"Authorization": f"Bearer {self.token}"}
        return httpx.Client(base_url=f"{self.replicas[replica].url}/api/v2", headers=auth, timeout=60)

    def stop(self) -> None:
        self.stopping.set()
        for daemon in self.daemons:
            with contextlib.suppress(Exception):
                daemon.stop()
        for replica in self.replicas:
            with contextlib.suppress(Exception):
                replica.stop()
        if self.redis is not None:
            stop([self.redis], grace=5)

    # -- the run -----------------------------------------------------------------------------------------------

    def run(self, progress: Callable[[str], None] = lambda line: None) -> SoakReport:
        plan = self.plan
        api = Api(self.replicas, self.token)
        began = time.monotonic()
        threads = [
            threading.Thread(target=self._workspace, args=(api, number, began), name=f"workspace-{number}")
            for number in range(plan.workspaces)
        ]
        threads += [
            threading.Thread(target=self._view, args=(viewer,), name=f"viewer-{viewer.number}")
            for viewer in self.viewers
        ]
        for background in (self._sample_memory, lambda: self._probe(api)):
            threading.Thread(target=background, daemon=True).start()
        for thread in threads:
            thread.daemon = True
            thread.start()

        # Half way (by default): kill -9 a replica with everything it runs, and start it again on its port.
        self.stopping.wait(max(0.0, plan.kill_after - (time.monotonic() - began)))
        victim = self.replicas[plan.killed_replica]
        running_at_kill = sum(
            1 for job in api.get("/provisionerjobs", (plan.killed_replica + 1) % plan.replicas, status="running")
        ) if plan.replicas > 1 else 0  # fmt: skip
        killed, killed_wall = time.monotonic(), datetime.now(UTC)
        victim.kill()
        progress(f"{killed - began:6.1f} s: replica {plan.killed_replica} killed ({running_at_kill} builds running)")
        victim.start()
        downtime, back_wall = time.monotonic() - killed, datetime.now(UTC)
        progress(f"{time.monotonic() - began:6.1f} s: replica {plan.killed_replica} back after {downtime:.1f} s")

        # The builds' schedule ends at plan.seconds; the last ones, and their viewers, then have time to finish.
        patience = plan.seconds + 600
        for thread in threads:
            thread.join(timeout=max(1.0, began + patience - time.monotonic()))
        self.stopping.set()
        wall = time.monotonic() - began
        progress(f"{wall:6.1f} s: every build and viewer is done" if not any(t.is_alive() for t in threads)
                 else f"{wall:6.1f} s: gave up waiting for {sum(t.is_alive() for t in threads)} threads")  # fmt: skip

        self._read_outcomes(api)
        for viewer in self.viewers:
            check_viewer(viewer, self.builds[viewer.build], plan.lines_per_build)
        runs = self.runs_file.read_text().split() if self.runs_file.exists() else []
        api.close()
        return SoakReport(
            plan=plan, builds=self.builds, viewers=self.viewers, api_calls=api.calls, failovers=api.failovers,
            runs=runs, began=began, killed_at=killed - began, downtime_seconds=downtime,
            outage=(killed_wall, back_wall), running_at_kill=running_at_kill,
            peak_rss_mb=[replica.peak_rss_mb for replica in self.replicas], wall_seconds=wall,
            daemon_logs={daemon.name: daemon.log() for daemon in self.daemons}, errors=self.errors,
        )  # fmt: skip

    def _probe(self, api: Api) -> None:
        replica = 0
        while not self.stopping.wait(PROBE_SECONDS):
            with contextlib.suppress(Exception):  # its calls are recorded, answered or not
                api.request("GET", "/workspaces", replica, params={"owner": "me"})
            replica = (replica + 1) % len(self.replicas)

    def _sample_memory(self) -> None:
        while not self.stopping.wait(1.0):
            for replica in self.replicas:
                replica.sample_rss()

    def _workspace(self, api: Api, workspace: int, began: float) -> None:
        """Its builds in turn, each at its time in the schedule and once the one before it ended."""
        plan = self.plan
        workspace_id = ""
        previous: Build | None = None
        try:
            for build in self.builds[workspace :: plan.workspaces]:
                due = began + build.number * plan.seconds / plan.builds
                if self.stopping.wait(max(0.0, due - time.monotonic())):
                    return
                if previous is not None and not self._wait_ended(api, previous):
                    self.errors.append(f"workspace {workspace}: build {previous.number} never ended; no more builds")
                    return
                workspace_id = self._create_build(api, build, workspace_id, previous)
                build.created.set()
                previous = build
        except Exception as exc:  # said in the report; the other workspaces go on
            self.errors.append(f"workspace {workspace}: {exc!r}")

    def _create_build(self, api: Api, build: Build, workspace_id: str, previous: Build | None) -> str:
        """Ask for the build; a request whose answer was lost is looked up before it is asked again."""
        name = f"soak-{build.workspace}"
        while True:
            try:
                if not workspace_id:
                    reply = api.request(
                        "POST", "/workspaces", build.replica, {"template_id": self.template_id, "name": name}
                    )
                else:
                    body = {"transition": build.transition}
                    reply = api.request("POST", f"/workspaces/{workspace_id}/builds", build.replica, body)
                assert reply.status_code == 201, f"build {build.number}: {reply.status_code} {reply.text}"
                made = reply.json()
                latest = made["latest_build"] if not workspace_id else made
                build.build_id, build.job_id = latest["id"], latest["job"]["id"]
                return workspace_id or str(made["id"])
            except AmbiguousRequest:
                build.ambiguous_requests += 1
                found = self._made_meanwhile(api, name, workspace_id, previous)
                if found is not None:
                    workspace_id, latest = found
                    build.build_id, build.job_id = latest["id"], latest["job"]["id"]
                    return workspace_id

    def _made_meanwhile(
        self, api: Api, name: str, workspace_id: str, previous: Build | None
    ) -> tuple[str, dict[str, Any]] | None:
        if not workspace_id:
            found = api.get("/workspaces", owner="me", name=name)
            return (str(found[0]["id"]), found[0]["latest_build"]) if found else None
        latest = api.get(f"/workspaces/{workspace_id}")["latest_build"]
        return (workspace_id, latest) if previous is None or latest["id"] != previous.build_id else None

    def _wait_ended(self, api: Api, build: Build) -> bool:
        """Asks twice a second (not wait_until's twenty: the asking is part of the measured load). False when the
        build stalled or did not end in time."""
        deadline = time.monotonic() + self.plan.seconds + 600
        while (status := api.get(f"/provisionerjobs/{build.job_id}", build.replica)["status"]) not in TERMINAL:
            if status == STALLED or self.stopping.wait(0.5) or time.monotonic() > deadline:
                return False
        return True

    def _view(self, viewer: ViewerResult) -> None:
        """Follow a build's log as EventSource does: on a dropped connection, back after the last event id."""
        build = self.builds[viewer.build]
        chooser = random.Random(self.plan.seed * 1000 + viewer.number)
        while not build.created.wait(1.0):
            if self.stopping.is_set():
                return
        # The first connection alternates between replicas, so that each holds streams when one is killed; a build's
        # second viewer starts on the other replica than its first.
        replica = (viewer.number + viewer.number // self.plan.builds) % self.plan.replicas
        timeout = httpx.Timeout(30, read=60)  # heartbeats come every ~15 s
        with httpx.Client(timeout=timeout, headers={"Authorization": f"Bearer {self.token}"}) as client:
            while not self.stopping.is_set():
                self._follow_once(client, self.replicas[replica].url, build, viewer)
                if viewer.end_status or viewer.problems:
                    return
                self.stopping.wait(RECONNECT_SECONDS)
                replica = chooser.randrange(self.plan.replicas)

    def _follow_once(self, client: httpx.Client, url: str, build: Build, viewer: ViewerResult) -> None:
        headers = {"Last-Event-ID": str(viewer.ids[-1])} if viewer.ids else {}
        path = f"{url}/api/v2/workspacebuilds/{build.build_id}/logs"
        viewer.connections += 1
        try:
            with client.stream("GET", path, params={"follow": "true"}, headers=headers) as response:
                if response.status_code != 200:
                    response.read()
                    viewer.refused.append(response.status_code)
                    if response.status_code != 429 and response.status_code < 500:
                        viewer.problems.append(f"stream refused: {response.status_code} {response.text[:200]}")
                    return
                for event in events(response):
                    if event.event == "end":
                        viewer.end_status = str(event.json["status"])
                        return
                    if event.event == "log" and event.id is not None:
                        viewer.ids.append(event.id)
                        numbered = NUMBERED_LINE.search(str(event.json["output"]))
                        if numbered:
                            viewer.numbers.append(int(numbered[1]))
        except httpx.TransportError:
            pass
        viewer.dropped += 1

    def _read_outcomes(self, api: Api) -> None:
        for build in self.builds:
            if not build.job_id:
                continue
            build.job = api.get(f"/provisionerjobs/{build.job_id}")
            lines = api.get(f"/workspacebuilds/{build.build_id}/logs")
            build.stored_ids = [int(line["id"]) for line in lines]


@contextlib.contextmanager
def soak_deployment(plan: SoakPlan, root: Path, cluster: PostgresCluster) -> Iterator[Soak]:
    soak = Soak(plan, root, cluster)
    try:
        soak.start()
        yield soak
    finally:
        soak.stop()


def percentile(values: list[float], share: float) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(share * (len(ordered) - 1))))]


def seconds_between(start: str | None, end: str | None) -> float | None:
    if not start or not end:
        return None
    return (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()


def _p50_p99(values: list[float], unit: str, scale: float = 1.0) -> str:
    if not values:
        return "none"
    return f"p50 {percentile(values, 0.5) * scale:.1f} {unit}, p99 {percentile(values, 0.99) * scale:.1f} {unit}"


def _overlaps(job: dict[str, Any], outage: tuple[datetime, datetime]) -> bool:
    """The job ran (acquired -> done) while the killed replica was away."""
    started, completed = job.get("started_at"), job.get("completed_at")
    if not started or not completed:
        return False
    return datetime.fromisoformat(started) < outage[1] and datetime.fromisoformat(completed) > outage[0]


def figures(report: SoakReport) -> list[str]:
    """What bench/soak.py prints (and the test shows on failure)."""
    plan = report.plan
    jobs = [build.job for build in report.builds]
    succeeded = [job for job in jobs if job.get("status") == "succeeded"]
    failed = [job for job in jobs if job.get("status") != "succeeded"]
    hit = [job for job in succeeded if _overlaps(job, report.outage)]
    spared = [job for job in succeeded if not _overlaps(job, report.outage)]

    def durations(of: list[dict[str, Any]], since: str) -> list[float]:
        return [d for job in of if (d := seconds_between(job.get(since), job.get("completed_at"))) is not None]

    answered = [call for call in report.api_calls if call.status]
    down_from, down_until = report.killed_at, report.killed_at + report.downtime_seconds
    during = [c.seconds for c in answered if down_from <= c.at - report.began <= down_until]
    outside = [c.seconds for c in answered if not down_from <= c.at - report.began <= down_until]
    errors = [call for call in answered if call.status >= 500]
    viewers_clean = sum(1 for viewer in report.viewers if not viewer.problems)
    return [
        f"plan: {plan.seconds:.0f} s of builds, {plan.replicas} replicas, {plan.daemons} daemons, {plan.builds} builds "
        f"on {plan.workspaces} workspaces, {plan.viewers} viewers, {plan.lines_per_build} lines a build "
        f"{plan.line_pause * 1000:.0f} ms apart; replica {plan.killed_replica} killed -9 at {report.killed_at:.0f} s",
        f"wall time {report.wall_seconds:.0f} s; builds running at the kill: {report.running_at_kill}",
        f"builds: {len(succeeded)} succeeded, {len(failed)} failed or unfinished",
        *(f"  failed: job {job.get('id')} {job.get('status')}: {job.get('error')}" for job in failed[:20]),
        f"build duration, queued -> done: {_p50_p99(durations(succeeded, 'created_at'), 's')}; "
        f"acquired -> done: {_p50_p99(durations(succeeded, 'started_at'), 's')}",
        f"  acquired -> done of the {len(hit)} builds running while the replica was away: "
        f"{_p50_p99(durations(hit, 'started_at'), 's')}; of the others: "
        f"{_p50_p99(durations(spared, 'started_at'), 's')}",
        f"applies noted: {len(report.runs)} for {len(set(report.runs))} builds",
        f"viewers: {viewers_clean}/{len(report.viewers)} saw every line of their build exactly once; "
        f"{sum(v.connections for v in report.viewers)} connections, {sum(v.dropped for v in report.viewers)} dropped "
        f"before the end, {sum(len(v.refused) for v in report.viewers)} refused "
        f"({sorted({status for v in report.viewers for status in v.refused})})",
        f"API during the run: {len(answered)} calls, {_p50_p99([c.seconds for c in answered], 'ms', 1000)}; "
        f"while the replica was away {_p50_p99(during, 'ms', 1000)}, otherwise {_p50_p99(outside, 'ms', 1000)}; "
        f"{len(errors)} answered 5xx, {len(report.api_calls) - len(answered)} without an answer (then sent to "
        "another replica)",
        "  slowest: "
        + "; ".join(
            f"{call.what} on replica {call.replica} at {call.at - report.began:.0f} s: {call.seconds * 1000:.0f} ms"
            for call in sorted(answered, key=lambda call: -call.seconds)[:3]
        ),
        f"replica {plan.killed_replica} downtime (kill -9 -> /healthz answers again): {report.downtime_seconds:.1f} s",
        "peak RSS (server and its children): "
        + ", ".join(f"replica {index} {rss:.0f} MB" for index, rss in enumerate(report.peak_rss_mb)),
    ]
