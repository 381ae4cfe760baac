"""The container image: built once for the module by deploy/image/build.py (as `make image` does), then inspected,
built a second time to show the build is reproducible, and really run with podman: a containerised
`slipway server` on PostgreSQL and Redis, and a containerised `slipway provisionerd start` with a provisioner key
taking a real build from it."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.server.embedded_redis import start_embedded_redis
from app.server.processes import stop
from tests.conftest import PASSWORD
from tests.support.container import Container, Podman, build_image, layer_differences, read_layout
from tests.support.http_daemon import api_client, sign_up_owner
from tests.support.net import free_port
from tests.support.postgres import PostgresCluster
from tests.support.provisionerd import push_import, wait_job
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

REDIS_PASSWORD = "image-redis-password"


class Built:
    def __init__(self, out: Path) -> None:
        # The commit the build takes (HEAD when it starts: a commit meanwhile must not confuse the label check).
        self.revision = subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        # The Debian stage is kept for the reproducibility test's second build.
        self.stage = out / "debian-stage"
        self.seconds, _output = build_image(out, "--revision", self.revision, "--debian-stage", str(self.stage))
        self.out = out
        self.layout = out / "image"
        self.index, self.manifest, self.config = read_layout(self.layout)

    @property
    def digest(self) -> str:
        return str(self.index["manifests"][0]["digest"])


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    out = tmp_path_factory.mktemp("image")
    return Built(out)


@pytest.fixture(scope="module")
def podman(built: Built, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Podman, str]]:
    # Outside pytest's tmp dirs: podman's overlay storage is unmounted and reset at the end, never left behind.
    runtime = Podman(tmp_path_factory.mktemp("podman"))
    try:
        yield runtime, runtime.load(built.layout)
    finally:
        runtime.close()


@pytest.fixture(scope="module")
def redis_tcp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The conftest Redis listens on a Unix socket in a 0700 directory the image's user cannot enter: this one
    listens on 127.0.0.1, as a Redis service does in a cluster."""
    port = free_port()
    process = start_embedded_redis(tmp_path_factory.mktemp("redis-tcp"), password=REDIS_PASSWORD, tcp_port=port)
    yield f"redis://:{REDIS_PASSWORD}@127.0.0.1:{port}/0"
    stop([process], grace=5)


@pytest.fixture(scope="module")
def server(
    podman: tuple[Podman, str], postgres: PostgresCluster, redis_tcp: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Container]:
    runtime, image = podman
    postgres.execute("CREATE DATABASE slipway_image")
    port = free_port()
    env = {
        "SLIPWAY_ADDRESS": f"127.0.0.1:{port}",
        "SLIPWAY_ACCESS_URL": f"http://127.0.0.1:{port}",
        "SLIPWAY_DATABASE_URL": postgres.url("slipway_image"),
        "SLIPWAY_REDIS_URL": redis_tcp,
        "SLIPWAY_PROVISIONER_DAEMONS": "0",
    }
    log = tmp_path_factory.mktemp("logs") / "server.log"
    container = runtime.run(image, "slipway-image-server", "server", env=env, log=log)
    container.url = f"http://127.0.0.1:{port}"
    container.wait_healthy()
    yield container
    assert container.stop() == 0, container.log()
    postgres.execute("DROP DATABASE slipway_image WITH (FORCE)")


def test_the_image_says_what_it_is_and_runs_as_its_own_user(built: Built) -> None:
    config = built.config["config"]
    labels = config["Labels"]
    revision = built.revision
    assert labels["org.opencontainers.image.revision"] == revision
    assert labels["org.opencontainers.image.version"] == "0.1.0"
    assert labels["org.opencontainers.image.source"].startswith("https://")
    assert config["User"] == "1000:1000"
    assert config["Entrypoint"] == ["/usr/local/bin/slipway"]
    assert config["WorkingDir"] == "/var/lib/slipway"
    tags = {entry["annotations"]["org.opencontainers.image.ref.name"] for entry in built.index["manifests"]}
    assert tags == {"0.1.0", "latest"}
    compressed = sum(layer["size"] for layer in built.manifest["layers"])
    assert compressed <= 250 * 1024 * 1024, f"{compressed / 2**20:.0f} MB compressed"
    # The docker archive holds the same image: skopeo reads its config back.
    inspected = subprocess.run(
        ["skopeo", "inspect", "--config", f"docker-archive:{built.out / 'slipway-image.tar'}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert revision in inspected


def test_a_second_build_of_the_commit_gives_the_same_image(built: Built, tmp_path: Path) -> None:
    """Everything after the Debian stage is built again (our wheel from the commit, pip, the hash-based bytecode the
    image's python3 compiles, the wheelhouse, the user, the scrubbing) and the uncompressed layer hashed: the image
    config, which names that layer by its diff_id, has the same digest. Not covered, to stay cheap: mmdebstrap's
    stage (reused; compared by hand, see the README), gzip (deterministic: no name, mtime 0) and the docker archive."""
    rootfs = tmp_path / "rootfs"
    _seconds, output = build_image(
        tmp_path / "out", "--revision", built.revision, "--debian-stage", str(built.stage), "--config-digest",
        "--keep-rootfs", str(rootfs),
    )  # fmt: skip
    assert "Debian rootfs copied from the stage" in output, output
    digest = next(line.split()[1] for line in output.splitlines() if line.startswith("config sha256:"))
    if digest != built.manifest["config"]["digest"]:
        epoch = int(_epoch(built.revision))
        differences = layer_differences(built.layout, rootfs, epoch)
        pytest.fail("the second build differs:\n" + "\n".join(differences[:50] or ["(only the config)"]))


def _epoch(revision: str) -> str:
    return subprocess.run(
        ["git", "log", "-1", "--format=%ct", revision], capture_output=True, text=True, check=True
    ).stdout.strip()


def test_the_containerised_server_serves_against_postgresql_and_redis(
    server: Container, podman: tuple[Podman, str]
) -> None:
    health = httpx.get(f"{server.url}/healthz", timeout=10)
    assert health.status_code == 200
    # Not root, in its own data dir, on a read-only root filesystem with writable data and cache dirs.
    assert server.exec("id", "-u") == "1000"
    assert server.exec("pwd") == "/var/lib/slipway"
    assert "Read-only file system" in _exec_error(podman[0], server.name, "touch", "/opt/slipway/x")
    server.exec("touch", "/var/lib/slipway/probe", "/var/cache/slipway/probe")


def _exec_error(runtime: Podman, name: str, *args: str) -> str:
    result = subprocess.run(["podman", "exec", name, *args], env=runtime.env, capture_output=True, text=True)
    assert result.returncode != 0
    return result.stderr


def test_a_containerised_daemon_with_a_key_takes_and_completes_a_build(
    server: Container, podman: tuple[Podman, str], tmp_path: Path
) -> None:
    url = server.url
    owner = api_client(url, sign_up_owner(url, PASSWORD))
    created = owner.post("/provisionerkeys", json={"name": "image-pool", "tags": {"pool": "image"}})
    assert created.status_code == 201, created.text
    runtime, image = podman
    daemon = runtime.run(
        image,
        "slipway-image-daemon",
        "provisionerd",
        "start",
        "--url",
        url,
        "--name",
        "in-a-container",
        env={"SLIPWAY_PROVISIONER_DAEMON_KEY": created.json()["key"]},
        log=tmp_path / "daemon.log",
    )
    try:
        wait_until(lambda: _daemon(owner, "in-a-container") is not None, 120, "the daemon to register")
        assert _daemon(owner, "in-a-container")["tags"]["pool"] == "image"  # type: ignore[index]  # the key's
        version = push_import(owner, tags={"pool": "image"})
        done = wait_job(owner, version["job"]["id"], ("succeeded", "failed", "canceled"), timeout=180)
        assert done["status"] == "succeeded", f"{done}\n{daemon.log()}"
        assert done["worker_id"] == _daemon(owner, "in-a-container")["id"]  # type: ignore[index]
    finally:
        assert daemon.stop() == 0, daemon.log()
        owner.close()


def _daemon(api: httpx.Client, name: str) -> dict[str, Any] | None:
    for daemon in api.get("/provisionerdaemons").json():
        if daemon["name"] == name and daemon["status"] != "offline":
            return dict(daemon)
    return None
