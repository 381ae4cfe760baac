"""External provisioners under failure, with real processes: a daemon killed mid-apply, Redis losing its queues,
cancel racing acquisition, credentials refused or revoked while a daemon runs."""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
import redis

from app.server.embedded_redis import start_embedded_redis
from app.server.processes import stop
from tests.conftest import PASSWORD
from tests.support.http_daemon import HttpDaemon, api_client, sign_up_owner
from tests.support.provisionerd import DAEMON_PSK, DaemonProcess, job, push_import, user_token, wait_job
from tests.support.server import ServerProcess
from tests.support.waiting import wait_until

TERMINAL = ("succeeded", "failed", "canceled")


def _server(data: Path, *args: str) -> ServerProcess:
    return ServerProcess(
        data,
        "--provisioner-daemons",
        "0",
        *args,
        env={"SLIPWAY_PROVISIONER_DAEMON_PSK": DAEMON_PSK, "SLIPWAY_PROVISIONER_HEARTBEAT_INTERVAL": "1s"},
    )


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    with _server(tmp_path / "data") as running:
        yield running


@pytest.fixture
def owner(server: ServerProcess) -> Iterator[httpx.Client]:
    client = api_client(server.url, sign_up_owner(server.url, PASSWORD))
    yield client
    client.close()


def _psk_daemon(server: ServerProcess, name: str, work: Path, *args: str) -> DaemonProcess:
    return DaemonProcess(server.url, name, work, *args, env={"SLIPWAY_PROVISIONER_DAEMON_PSK": DAEMON_PSK})


def _local_exec(command: str) -> dict[str, str]:
    provisioner = f'  provisioner "local-exec" {{\n    command = "{command}"\n  }}\n'
    return {"main.tf": f'resource "terraform_data" "slow" {{\n{provisioner}}}\n'}


def _slow_template(marker: Path) -> dict[str, str]:
    """A build whose apply sleeps while ``marker`` exists, so a test decides which builds are slow."""
    return _local_exec(f"if [ -e {marker} ]; then sleep 120; fi")


def _template(api: httpx.Client, files: dict[str, str]) -> dict[str, Any]:
    version = push_import(api, files=files)
    imported = wait_job(api, version["job"]["id"], TERMINAL, timeout=120)
    assert imported["status"] == "succeeded", imported
    created = api.post("/templates", json={"name": "slow", "version_id": version["id"]})
    assert created.status_code == 201, created.text
    return dict(created.json())


@pytest.fixture
def marker(tmp_path: Path) -> Iterator[Path]:
    """The slow template's switch; afterwards, whatever local-exec a killed daemon left behind is ended too."""
    yield tmp_path / "slow"
    for pid in _applying(tmp_path / "slow"):
        with contextlib.suppress(psutil.Error):
            shell = psutil.Process(pid)
            for process in [*shell.children(recursive=True), shell]:
                process.kill()


def test_a_daemon_killed_mid_apply_is_reaped_and_the_next_build_succeeds(tmp_path: Path, marker: Path) -> None:
    with (
        _server(tmp_path / "data", "--provisioner-hang-timeout", "6s") as server,
        api_client(server.url, sign_up_owner(server.url, PASSWORD)) as api,
    ):
        first = _psk_daemon(server, "doomed", tmp_path).start()
        first.wait_registered(api)
        template = _template(api, _slow_template(marker))
        marker.touch()
        workspace = api.post("/workspaces", json={"template_id": template["id"], "name": "ws"}).json()
        build_job = workspace["latest_build"]["job"]["id"]
        assert wait_job(api, build_job, ("running",))["status"] == "running"
        wait_until(lambda: _applying(marker), timeout=60, what="the apply's local-exec to start")
        first.kill_all()

        reaped = wait_job(api, build_job, TERMINAL, timeout=40)
        assert reaped["status"] == "failed" and "hung" in reaped["error"], reaped
        logs = api.get(f"/workspacebuilds/{workspace['latest_build']['id']}/logs").json()
        assert any("hung" in line["output"] and line["level"] == "error" for line in logs)

        marker.unlink()
        with _psk_daemon(server, "survivor", tmp_path) as second:
            second.wait_registered(api)
            build = api.post(f"/workspaces/{workspace['id']}/builds", json={"transition": "start"})
            assert build.status_code == 201, build.text
            done = wait_job(api, build.json()["job"]["id"], TERMINAL, timeout=120)
            assert done["status"] == "succeeded", second.log()

            # The survivor's host freezes mid-apply past the hang timeout (SIGSTOP of it and its Terraform): the job
            # is reaped, and when the host wakes, its Terraform must not go on applying to a workspace it lost.
            marker.touch()
            leftovers = _applying(marker)  # the killed daemon's local-exec outlives it (it has its own session)
            created = api.post("/workspaces", json={"template_id": template["id"], "name": "frozen"})
            assert created.status_code == 201, created.text
            frozen_job = created.json()["latest_build"]["job"]["id"]
            wait_until(lambda: _applying(marker) - leftovers, timeout=60, what="the apply's local-exec to start")
            (applying,) = _applying(marker) - leftovers
            _signal_tree(second, signal.SIGSTOP)
            try:
                reaped = wait_job(api, frozen_job, TERMINAL, timeout=60)
            finally:
                _signal_tree(second, signal.SIGCONT)
            assert reaped["status"] == "failed" and "hung" in reaped["error"], reaped
            wait_until(lambda: applying not in _applying(marker), timeout=30, what="the woken daemon to stop Terraform")
            assert "no longer this daemon's" in second.log()
            assert second.process is not None and second.process.poll() is None  # it lives on for the next job


def _applying(marker: Path) -> set[int]:
    """The processes of the slow template's local-exec (its shell names the marker)."""
    return {
        process.pid
        for process in psutil.process_iter(["cmdline"])
        if str(marker) in " ".join(process.info["cmdline"] or [])
    }


def _signal_tree(daemon: DaemonProcess, signum: int) -> None:
    assert daemon.process is not None
    root = psutil.Process(daemon.process.pid)
    for process in [root, *root.children(recursive=True)]:
        with contextlib.suppress(psutil.Error):
            process.send_signal(signum)


def test_redis_flushed_with_twenty_pending_jobs_all_finish(
    server: ServerProcess, owner: httpx.Client, tmp_path: Path
) -> None:
    jobs = [push_import(owner)["job"]["id"] for _ in range(20)]
    connection = redis.Redis.from_url(server.redis_url)
    connection.flushall()
    assert connection.dbsize() == 0
    connection.close()
    with _psk_daemon(server, "a", tmp_path), _psk_daemon(server, "b", tmp_path):
        deadline = time.monotonic() + 240
        while (statuses := {job(owner, job_id)["status"] for job_id in jobs}) != {"succeeded"}:
            assert time.monotonic() < deadline and statuses <= {"pending", "running", "succeeded"}, statuses
            time.sleep(0.5)


def test_cancel_never_loses_to_a_concurrent_acquire(server: ServerProcess, owner: httpx.Client) -> None:
    """200 races: either the cancel wins (canceled, never run) or the acquire does (running, then canceling)."""
    daemon = HttpDaemon(server.url, DAEMON_PSK, name="racer")
    outcomes = {"cancel won": 0, "acquire won": 0}
    try:
        for _ in range(200):
            job_id = push_import(owner)["job"]["id"]
            start = threading.Barrier(2)
            replies: dict[str, httpx.Response] = {}

            def acquire(
                job_id: str = job_id, start: threading.Barrier = start, replies: dict[str, httpx.Response] = replies
            ) -> None:
                start.wait()
                replies["acquire"] = daemon.call(f"/jobs/{job_id}/acquire")

            racer = threading.Thread(target=acquire)
            racer.start()
            start.wait()
            replies["cancel"] = owner.patch(f"/provisionerjobs/{job_id}/cancel")
            racer.join()
            final = job(owner, job_id)
            assert replies["cancel"].status_code == 200
            if replies["acquire"].status_code == 200:
                assert final["status"] == "canceling" and final["worker_name"] == "racer", final
                assert daemon.call(f"/jobs/{job_id}/logs", {"logs": []}).json()["canceled"] is True
                assert daemon.call(f"/jobs/{job_id}/fail", {"error": "canceled"}).status_code == 204
                outcomes["acquire won"] += 1
            else:
                assert replies["acquire"].status_code == 409, replies["acquire"].text
                assert final["status"] == "canceled" and final["started_at"] is None and final["worker_name"] == ""
                outcomes["cancel won"] += 1
    finally:
        daemon.close()
    assert sum(outcomes.values()) == 200, outcomes
    print(f"cancel-versus-acquire outcomes: {outcomes}")


def test_refused_daemons_exit_with_the_reason(server: ServerProcess, owner: httpx.Client, tmp_path: Path) -> None:
    wrong = DaemonProcess(server.url, "wrong", tmp_path, env={"SLIPWAY_PROVISIONER_DAEMON_PSK": "not-it"}).start()
    assert wrong.wait_exit() == 1
    assert "PSK is wrong" in wrong.log()

    member = user_token(server.url, owner, "carol", [], PASSWORD)
    org = DaemonProcess(server.url, "carols-org", tmp_path, env={"SLIPWAY_SESSION_TOKEN": member}).start()
    assert org.wait_exit() == 1
    assert "Only owners and template admins" in org.log()

    # A member's user-scoped daemon runs until the member is suspended.
    with DaemonProcess(
        server.url, "carols", tmp_path, "--tag", "scope=user", env={"SLIPWAY_SESSION_TOKEN": member}
    ) as mine:
        mine.wait_registered(owner)
        carol = next(user for user in owner.get("/users").json() if user["username"] == "carol")
        assert owner.patch(f"/users/{carol['id']}", json={"status": "suspended"}).status_code == 200
        assert mine.wait_exit(timeout=30) == 1
        assert "the server refused this daemon" in mine.log()  # suspension also ended the session

    key = owner.post("/provisionerkeys", json={"name": "pool", "tags": {"pool": "a"}}).json()["key"]
    with DaemonProcess(server.url, "keyed", tmp_path, env={"SLIPWAY_PROVISIONER_DAEMON_KEY": key}) as keyed:
        registered = keyed.wait_registered(owner)
        assert registered["tags"] == {"pool": "a", "scope": "organization", "owner": ""}
        assert registered["key_name"] == "pool"
        assert owner.delete("/provisionerkeys/pool").status_code == 204
        assert keyed.wait_exit(timeout=30) == 1
        assert "deleted" in keyed.log()
        assert key not in keyed.log()


def test_sigterm_finishes_the_job_and_sigint_cancels_it(
    server: ServerProcess, owner: httpx.Client, tmp_path: Path
) -> None:
    marker = tmp_path / "slow"
    files = _local_exec(f"sleep 3; if [ -e {marker} ]; then sleep 120; fi")
    with _psk_daemon(server, "builder", tmp_path) as daemon:
        daemon.wait_registered(owner)
        template = _template(owner, files)
        workspace = owner.post("/workspaces", json={"template_id": template["id"], "name": "ws"}).json()
        first = workspace["latest_build"]["job"]["id"]
        assert wait_job(owner, first, ("running",))["status"] == "running"
        daemon.signal(signal.SIGTERM)
        assert wait_job(owner, first, TERMINAL, timeout=120)["status"] == "succeeded", daemon.log()
        assert daemon.wait_exit() == 0

    marker.touch()
    with _psk_daemon(server, "builder", tmp_path) as daemon:
        daemon.wait_registered(owner)
        second = owner.post("/workspaces", json={"template_id": template["id"], "name": "ws2"}).json()
        job_id = second["latest_build"]["job"]["id"]
        assert wait_job(owner, job_id, ("running",))["status"] == "running"
        time.sleep(4)  # past the first sleep, into the one the marker makes long
        daemon.signal(signal.SIGINT)
        ended = wait_job(owner, job_id, TERMINAL, timeout=60)
        assert ended["status"] == "failed" and "SIGINT" in ended["error"], ended
        assert daemon.wait_exit() == 0

    # Started twice from one cache dir, it is one daemon (its identity is kept there), with a plugin cache of its own.
    builders = [d for d in owner.get("/provisionerdaemons").json() if d["name"] == "builder"]
    assert len(builders) == 1, builders
    identity = (tmp_path / "provisioner-cache" / "identity" / "builder").read_text().strip()
    assert [path.name for path in (tmp_path / "provisioner-cache" / "plugins").iterdir()] == [identity]


def test_a_redis_daemon_rides_out_redis_outages_at_its_start_and_as_a_job_ends(tmp_path: Path, marker: Path) -> None:
    """An external daemon trusted with Redis: Redis down when it starts, and down again while its build finishes
    (RQ's bookkeeping then fails). It waits, says so, and takes the next jobs once Redis is back; it never exits."""
    redis_dir = tmp_path / "redis"
    redis_dir.mkdir()
    redis_process = start_embedded_redis(redis_dir)
    env = {
        "SLIPWAY_PROVISIONER_DAEMON_PSK": DAEMON_PSK,
        "SLIPWAY_REDIS_URL": f"unix://{redis_dir / 'redis.sock'}",
        "SLIPWAY_PROVISIONER_TRUST_REDIS": "psk",
    }
    try:
        with (
            ServerProcess(tmp_path / "data", "--provisioner-daemons", "0", env=env) as server,
            api_client(server.url, sign_up_owner(server.url, PASSWORD)) as api,
        ):
            stop([redis_process], grace=5)
            with _psk_daemon(server, "steady", tmp_path) as daemon:
                daemon.wait_registered(api)
                wait_until(lambda: "Redis is not answering" in daemon.log(), timeout=60, what="the daemon to wait")
                redis_process = start_embedded_redis(redis_dir)
                template = _template(
                    api, _local_exec(f"while [ -e {marker} ]; do sleep 0.2; done")
                )  # once Redis is back
                assert "listening on" in daemon.log()

                marker.touch()
                created = api.post("/workspaces", json={"template_id": template["id"], "name": "ws"})
                build_job = created.json()["latest_build"]["job"]["id"]
                wait_until(lambda: _applying(marker), timeout=60, what="the apply's local-exec to start")
                stop([redis_process], grace=5)
                marker.unlink()  # the build finishes while Redis is away
                assert wait_job(api, build_job, TERMINAL, timeout=120)["status"] == "succeeded", daemon.log()
                wait_until(
                    lambda: daemon.log().count("Redis is not answering") >= 2, timeout=60, what="the second wait"
                )
                assert daemon.process is not None and daemon.process.poll() is None, daemon.log()

                redis_process = start_embedded_redis(redis_dir)
                second = api.post("/workspaces", json={"template_id": template["id"], "name": "ws2"})
                done = wait_job(api, second.json()["latest_build"]["job"]["id"], TERMINAL, timeout=120)
                assert done["status"] == "succeeded", daemon.log()
                assert "Traceback" not in daemon.log(), daemon.log()
    finally:
        stop([redis_process], grace=5)


def test_a_build_that_finishes_while_the_server_is_down_keeps_its_state(tmp_path: Path, marker: Path) -> None:
    """The server goes away mid-apply; the apply finishes; the daemon, unable to report, is killed too. Its outcome
    waited on its disk: started again once the server is back, it reports it, and the state Terraform left is the
    one the next build starts from (it knows the resource the build created, rather than nothing)."""
    server = _server(tmp_path / "data")
    with server, api_client(server.url, sign_up_owner(server.url, PASSWORD)) as api:
        daemon = _psk_daemon(server, "keeper", tmp_path).start()
        daemon.wait_registered(api)
        template = _template(api, _local_exec(f"while [ -e {marker} ]; do sleep 0.2; done"))
        marker.touch()
        created = api.post("/workspaces", json={"template_id": template["id"], "name": "ws"}).json()
        build = created["latest_build"]
        wait_until(lambda: _applying(marker), timeout=60, what="the apply's local-exec to start")

        assert server.stop() == 0
        marker.unlink()  # the apply finishes while nobody can hear of it
        outbox = tmp_path / "provisioner-cache" / "outbox"
        wait_until(lambda: any(outbox.rglob(f"{build['job']['id']}.json")), timeout=60, what="the outcome on disk")
        daemon.kill_all()

        server.start()
        with _psk_daemon(server, "keeper", tmp_path) as again:
            again.wait_registered(api)

            def told() -> bool:
                lines = api.get(f"/workspacebuilds/{build['id']}/logs").json()
                return any("state it left is recorded" in line["output"] for line in lines)

            wait_until(told, timeout=120, what="the kept outcome to be recorded")
            # The server records it while answering the daemon, which forgets its copy once that answer arrives.
            wait_until(lambda: not any(outbox.rglob("*.json")), timeout=30, what="the outcome to be forgotten")
            stop = api.post(f"/workspaces/{created['id']}/builds", json={"transition": "stop"})
            assert stop.status_code == 201, stop.text
            done = wait_job(api, stop.json()["job"]["id"], TERMINAL, timeout=120)
            assert done["status"] == "succeeded", again.log()
            stop_log = " ".join(line["output"] for line in api.get(f"/workspacebuilds/{stop.json()['id']}/logs").json())
            assert "terraform_data.slow: Refreshing state... [id=" in stop_log, stop_log[-2000:]
