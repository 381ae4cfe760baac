"""An external daemon on a host of its own (a network namespace) reaching a real `slipway server` over a link that
the test partitions or degrades packet by packet, while real Terraform builds run: the build's log, its outcome and
Terraform's single apply all survive the network.

The server listens only on this host's end of the link, so everything the daemon says crosses the faulty link,
while the test's own API calls (from this host) do not."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import PASSWORD
from tests.support.http_daemon import api_client, sign_up_owner
from tests.support.netns import HEALTHY, Faults, IsolatedHost
from tests.support.numbered_build import TERMINAL, NumberedBuild
from tests.support.provisionerd import DAEMON_PSK, DaemonProcess, wait_job
from tests.support.server import ServerProcess
from tests.support.waiting import wait_until

PARTITION_SECONDS = 60.0


@pytest.fixture
def host() -> Iterator[IsolatedHost]:
    """The daemon's host; removed (with whatever still runs in it) however the test ends."""
    with IsolatedHost() as isolated:
        print(f"link {isolated.server_address} <-> {isolated.address}, loss seed {isolated.seed}")
        yield isolated


@pytest.fixture
def server(tmp_path: Path, host: IsolatedHost) -> Iterator[ServerProcess]:
    env = {"SLIPWAY_PROVISIONER_DAEMON_PSK": DAEMON_PSK, "SLIPWAY_PROVISIONER_HEARTBEAT_INTERVAL": "1s"}
    with ServerProcess(
        tmp_path / "data", "--provisioner-daemons", "0", env=env, bind_address=host.server_address
    ) as running:
        yield running


@pytest.fixture
def api(server: ServerProcess) -> Iterator[httpx.Client]:
    with api_client(server.url, sign_up_owner(server.url, PASSWORD)) as client:
        yield client


@pytest.fixture
def daemon(server: ServerProcess, host: IsolatedHost, api: httpx.Client, tmp_path: Path) -> Iterator[DaemonProcess]:
    env = {"SLIPWAY_PROVISIONER_DAEMON_PSK": DAEMON_PSK}
    with DaemonProcess(server.url, "remote", tmp_path, env=env, wrapper=host.command()) as running:
        yield running
        host.apply(HEALTHY)  # so that it can say goodbye before the host goes


def _connect_seconds(host: IsolatedHost, timeout: float) -> float | None:
    """How long a TCP connection from inside the host to this one takes to open; None when it could not."""
    with socket.create_server((host.server_address, 0)) as listener:
        port = listener.getsockname()[1]
        probe = (
            "import socket, sys, time\n"
            "start = time.monotonic()\n"
            f"try: socket.create_connection(({host.server_address!r}, {port}), timeout={timeout}).close()\n"
            "except OSError: sys.exit(1)\n"
            "print(time.monotonic() - start)\n"
        )
        done = subprocess.run(
            host.command(sys.executable, "-c", probe), capture_output=True, text=True, timeout=timeout + 30, check=False
        )
    return float(done.stdout) if done.returncode == 0 else None


def test_the_emulated_link_carries_delays_and_cuts_tcp(host: IsolatedHost) -> None:
    """What the other tests rely on: the faults are real for the kernel's TCP (a connection's handshake takes a
    round trip, so twice the one-way delay; a partition lets nothing through), and healing restores the link."""
    healthy = _connect_seconds(host, timeout=10)
    assert healthy is not None
    host.apply(Faults(delay=0.15))
    delayed = _connect_seconds(host, timeout=10)
    assert delayed is not None and delayed >= 0.3, delayed
    host.apply(Faults(partitioned=True))
    assert _connect_seconds(host, timeout=2) is None
    host.apply(HEALTHY)
    assert _connect_seconds(host, timeout=10) is not None


def _outbox(tmp_path: Path) -> Path:
    return tmp_path / "provisioner-cache" / "outbox"


@pytest.mark.timeout(600)
def test_a_build_partitioned_from_the_server_for_a_minute_mid_apply_succeeds_once_with_its_whole_log(
    tmp_path: Path, host: IsolatedHost, api: httpx.Client, daemon: DaemonProcess
) -> None:
    """The link drops every packet for a minute of the apply: the daemon holds the lines it cannot ship, keeps the
    outcome on its disk when the apply ends meanwhile, and delivers both once the link heals (well within the
    lease, so the server never gives the job up). The build succeeds, each line is in its log once (batches sent
    again are stored once), Terraform applied once, and the outbox is empty."""
    daemon.wait_registered(api, timeout=60)
    numbered = NumberedBuild(runs=tmp_path / "runs", switch=tmp_path / "switch")
    build = numbered.start(api, numbered.template(api))

    host.apply(Faults(partitioned=True))
    cut_at = time.monotonic()
    # Lines printed now cannot be shipped: the daemon says so once a batch has failed, and holds them.
    wait_until(lambda: "keeping them to send again" in daemon.log(), timeout=PARTITION_SECONDS, what="a held batch")
    numbered.switch.unlink()  # the apply ends while the partition lasts: its outcome waits on the daemon's disk
    outcome = f"{build['job']['id']}.json"
    # On a busy machine this may take past the minute: the partition then lasts until it is done (well within the
    # 4 minutes after which the daemon would give the job up).
    wait_until(lambda: any(_outbox(tmp_path).rglob(outcome)), timeout=120, what="the outcome to be kept on disk")
    time.sleep(max(0.0, PARTITION_SECONDS - (time.monotonic() - cut_at)))  # the fault's length, not a wait
    host.apply(HEALTHY)
    healed_at = time.monotonic()
    assert host.link is not None and host.link.dropped > 0

    done = wait_job(api, build["job"]["id"], TERMINAL, timeout=180)
    assert done["status"] == "succeeded", (done, daemon.log()[-3000:])
    printed = numbered.assert_ran_once_and_logged_each_line_once(api, build["id"])
    wait_until(lambda: not any(_outbox(tmp_path).rglob("*.json")), timeout=30, what="the outbox to empty")
    assert "Traceback" not in daemon.log(), daemon.log()
    print(
        f"{printed} lines; partitioned {healed_at - cut_at:.0f} s, then {time.monotonic() - healed_at:.0f} s to the end"
    )


@pytest.mark.timeout(600)
def test_an_import_and_a_build_over_a_slow_lossy_link_succeed_once_with_their_whole_log(
    tmp_path: Path, host: IsolatedHost, api: httpx.Client, server: ServerProcess
) -> None:
    """From registration to the build's end, every packet either way is 150 ms late (a 300 ms round trip) and one
    in ten is lost: TCP's retransmissions are slow but the daemon's retries and the server's numbering keep the
    build whole: the import and the build succeed, the build's log holds each line once, Terraform applied once."""
    host.apply(Faults(delay=0.15, loss=0.10))
    env = {"SLIPWAY_PROVISIONER_DAEMON_PSK": DAEMON_PSK}
    with DaemonProcess(server.url, "far", tmp_path, env=env, wrapper=host.command()) as daemon:
        daemon.wait_registered(api, timeout=120)
        numbered = NumberedBuild(runs=tmp_path / "runs", switch=tmp_path / "switch", at_least=200)
        template = numbered.template(api, timeout=240)
        created = api.post("/workspaces", json={"template_id": template["id"], "name": "ws"})
        assert created.status_code == 201, created.text
        build = created.json()["latest_build"]
        done = wait_job(api, build["job"]["id"], TERMINAL, timeout=300)
        assert done["status"] == "succeeded", (done, daemon.log()[-3000:])
        numbered.assert_ran_once_and_logged_each_line_once(api, build["id"])
        assert host.link is not None and host.link.dropped > 0, "the link lost nothing: the test proves less"
        wait_until(lambda: not any(_outbox(tmp_path).rglob("*.json")), timeout=30, what="the outbox to empty")
        assert "Traceback" not in daemon.log(), daemon.log()
        host.apply(HEALTHY)
