"""Issue 3 benchmark: what Slipway adds on top of Terraform for a build, how fast an idle daemon picks a job
up, and what an idle daemon costs in memory.

- K workspace builds of examples/local through the API (request -> job succeeded), and in the same run K bare
  `terraform init` + `apply` of the same files in a temp dir with the same Terraform and provider: medians and
  their ratio (target <= 1.25).
- Queue pickup (created -> started) p50/p95 over N jobs with an idle daemon (target p95 <= 100 ms).
- A built-in daemon's idle RSS (target <= 100 MB).
Run: .venv/bin/python bench/build_overhead.py [--builds 5] [--jobs 50]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import httpx
import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))
from _harness import Server, median, percentile  # noqa: E402

from workers.archive import pack_directory  # noqa: E402
from workers.provider_install import install_coder_provider  # noqa: E402
from workers.terraform import build_coder_env, find_terraform, terraform_environment  # noqa: E402

PASSWORD = "correct-horse-battery"
EXAMPLE = ROOT / "examples" / "local"


def wait_job(client: httpx.Client, path: str) -> dict[str, object]:
    while True:
        job: dict[str, object] = client.get(path).json()["job"]
        if job["status"] in ("succeeded", "failed", "canceled"):
            if job["status"] != "succeeded":
                raise RuntimeError(f"job {job['id']} {job['status']}: {job['error']}")
            return job
        time.sleep(0.01)


def parse_time(value: object) -> datetime:
    return datetime.fromisoformat(str(value).replace("Z", "+00:00"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--builds", type=int, default=5)
    parser.add_argument("--jobs", type=int, default=50)
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="slipway-bench-build-"))
    server = Server(extra_args=("--provisioner-daemons", "1")).start()
    try:
        base = server.url
        httpx.post(
            f"{base}/api/v2/users/first", json={"username": "alice", "email": "a@example.com", "password": PASSWORD}
        )
        token = httpx.post(f"{base}/api/v2/users/login", json={"email": "a@example.com", "password": PASSWORD}).json()
        client = httpx.Client(base_url=f"{base}/api/v2", headers={"Authorization": f"Bearer {token['session_token']}"})
        upload = client.post(
            "/files", content=pack_directory(EXAMPLE), headers={"Content-Type": "application/x-tar"}
        ).json()
        variables = [{"name": "workspaces_root", "value": str(scratch / "slipway")}]
        version = client.post(
            "/templateversions", json={"file_id": upload["id"], "user_variable_values": variables}
        ).json()
        wait_job(client, f"/templateversions/{version['id']}")
        template = client.post("/templates", json={"name": "local", "version_id": version["id"]}).json()

        time.sleep(2.0)  # let the daemon settle before measuring it idle
        daemon_rss = [
            proc.memory_info().rss / 1e6
            for proc in psutil.Process(server.process.pid).children(recursive=True)  # type: ignore[union-attr]
            if proc.cmdline()[1:3] == ["-m", "workers"]  # a built-in daemon, not gunicorn's --workers
        ]

        through_api = []
        for index in range(args.builds):
            began = time.perf_counter()
            workspace = client.post("/workspaces", json={"template_id": template["id"], "name": f"ws{index}"}).json()
            wait_job(client, f"/workspacebuilds/{workspace['latest_build']['id']}")
            through_api.append(time.perf_counter() - began)

        bare = bare_terraform_runs(args.builds, scratch, server.url)

        pickups = []
        tiny = scratch / "tiny"
        tiny.mkdir()
        (tiny / "main.tf").write_text("# nothing to build: a job that measures the queue, not Terraform\n")
        tiny_file = client.post(
            "/files", content=pack_directory(tiny), headers={"Content-Type": "application/x-tar"}
        ).json()
        for _ in range(args.jobs):
            created = client.post("/templateversions", json={"file_id": tiny_file["id"]}).json()
            job = wait_job(client, f"/templateversions/{created['id']}")
            pickups.append((parse_time(job["started_at"]) - parse_time(job["created_at"])).total_seconds() * 1000)
    finally:
        server.stop()
        shutil.rmtree(scratch, ignore_errors=True)

    api_median, bare_median = median(through_api), median(bare)
    api_runs, bare_runs = (", ".join(f"{t:.2f}" for t in runs) for runs in (through_api, bare))
    p50, p95 = percentile(pickups, 0.5), percentile(pickups, 0.95)
    print(f"build_overhead: {args.builds} builds of examples/local, {find_terraform().kind}, 1 idle built-in daemon")
    print(f"  through Slipway (request -> succeeded): median {api_median:.2f} s  ({api_runs})")
    print(f"  bare terraform init + apply:            median {bare_median:.2f} s  ({bare_runs})")
    print(f"  ratio: {api_median / bare_median:.2f}   (target <= 1.25)")
    print(f"  queue pickup over {len(pickups)} jobs: p50 {p50:.0f} ms, p95 {p95:.0f} ms   (target p95 <= 100 ms)")
    print(f"  idle daemon RSS: {', '.join(f'{r:.0f} MB' for r in daemon_rss)}   (target <= 100 MB)")


def bare_terraform_runs(count: int, scratch: Path, access_url: str) -> list[float]:
    """The same template, the same Terraform and provider mirror, run by hand: what Terraform alone costs."""
    cache = scratch / "bare-cache"
    cache.mkdir()
    binary = find_terraform()
    times = []
    for index in range(count):
        workdir = scratch / f"bare{index}"
        shutil.copytree(EXAMPLE, workdir)
        coder_env = build_coder_env(
            access_url=access_url, transition="start", workspace_name=f"bare{index}", workspace_id=f"id{index}",
            build_id="b", owner_name="alice", owner_id="u", owner_email="a@example.com",
        )  # fmt: skip
        env = terraform_environment(
            os.environ, coder_env, cache_dir=cache, cli_config_file=install_coder_provider(cache)
        )
        var = f"workspaces_root={scratch / 'bare-workspaces'}"
        began = time.perf_counter()
        for step in (["init", "-no-color"], ["apply", "-auto-approve", "-json", "-var", var]):
            subprocess.run(binary.argv(*step, "-input=false"), cwd=workdir, env=env, check=True, capture_output=True)
        times.append(time.perf_counter() - began)
        destroy = binary.argv("destroy", "-auto-approve", "-input=false", "-var", var)
        subprocess.run(destroy, cwd=workdir, env=env, check=True, capture_output=True)
    return times


if __name__ == "__main__":
    main()
