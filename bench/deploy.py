"""Deploying Slipway, measured. One script, in sections (`--section NAME`, repeatable; default: all):

image   `deploy/image/build.py` from scratch (wall time, target ≤ 5 min), the image's compressed size (target
        ≤ 250 MB) and the docker archive's; cold start of the containerised `slipway server` (podman, a new
        container each run, its data dir empty) until /healthz answers 200, on SQLite (target ≤ 3 s) and on
        PostgreSQL with Redis (target ≤ 4 s): medians over --runs.

More sections (the rolling restart of replicas) belong here too.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))
from _harness import free_port, median  # noqa: E402

from tests.support.container import Podman, build_image, read_layout  # noqa: E402


@contextmanager
def postgres_and_tcp_redis() -> Iterator[tuple[str, str]]:
    """A PostgreSQL cluster and a Redis on 127.0.0.1: the container's user cannot enter a private socket dir."""
    from app.server.embedded_redis import start_embedded_redis
    from app.server.processes import stop
    from tests.support.postgres import PostgresCluster

    cluster = PostgresCluster()
    cluster.start()
    port = free_port()
    redis_process = start_embedded_redis(Path(tempfile.mkdtemp(prefix="slipway-bench-redis-")), tcp_port=port)
    try:
        yield cluster.url("postgres"), f"redis://127.0.0.1:{port}/0"
    finally:
        stop([redis_process], grace=5)
        cluster.stop()


def cold_start(podman: Podman, image: str, env: dict[str, str], log: Path) -> float:
    """Seconds from `podman run` to the first /healthz 200 of a new container."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**env, "SLIPWAY_ADDRESS": f"127.0.0.1:{port}", "SLIPWAY_ACCESS_URL": url, "SLIPWAY_PROVISIONER_DAEMONS": "0"}
    began = time.perf_counter()
    container = podman.run(image, f"slipway-bench-{port}", "server", env=env, log=log)
    container.url = url
    try:
        container.wait_healthy()
        return time.perf_counter() - began
    finally:
        container.stop()


def image_section(runs: int, scratch: Path) -> None:
    out = scratch / "dist"
    seconds = build_image(out)
    index, manifest, _config = read_layout(out / "image")
    compressed = sum(layer["size"] for layer in manifest["layers"]) / 2**20
    archive = (out / "slipway-image.tar").stat().st_size / 2**20
    print(f"image build (from scratch)        {seconds:6.1f} s        (target ≤ 300 s)")
    print(f"image compressed                  {compressed:6.1f} MB       (target ≤ 250 MB)")
    print(f"docker archive (uncompressed)     {archive:6.1f} MB")
    # Two runs at one commit print one digest: the build is reproducible.
    print(f"image digest                      {index['manifests'][0]['digest']}")
    podman = Podman(scratch / "podman")
    try:
        image = podman.load(out / "image")
        sqlite = [cold_start(podman, image, {}, scratch / "sqlite.log") for _ in range(runs)]
        _report("cold start to /healthz, SQLite", sqlite, 3.0)
        with postgres_and_tcp_redis() as (database_url, redis_url):
            # One secret key for all runs: each container's data dir is new, the database's encrypted secrets not.
            env = {"SLIPWAY_DATABASE_URL": database_url, "SLIPWAY_REDIS_URL": redis_url, "SLIPWAY_SECRET_KEY": "bench"}
            # Each run a new container on the same database: the first migrates it, like a first deployment.
            postgres = [cold_start(podman, image, env, scratch / "postgres.log") for _ in range(runs)]
        _report("cold start to /healthz, PostgreSQL", postgres, 4.0)
    finally:
        podman.close()


def _report(label: str, seconds: list[float], target: float) -> None:
    runs = " ".join(f"{value:.2f}" for value in seconds)
    print(f"{label:<34}{median(seconds):6.2f} s median (target ≤ {target:.0f} s)   runs {runs}")


SECTIONS: dict[str, Callable[[int, Path], None]] = {"image": image_section}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--section", action="append", choices=sorted(SECTIONS), help="(repeatable) default: all")
    parser.add_argument("--runs", type=int, default=5, help="cold starts per database")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="slipway-bench-deploy-") as scratch:
        for name in args.section or list(SECTIONS):
            print(f"== {name}")
            SECTIONS[name](args.runs, Path(scratch))


if __name__ == "__main__":
    main()
