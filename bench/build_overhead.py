"""Issue 3 benchmark: what Slipway adds on top of Terraform for a build, how fast an idle daemon picks a job
up, and what an idle daemon costs in memory.

- K workspace builds of examples/local through the API (request -> job succeeded) with the daemon's init cache
  warm (issue 18: the import prepared the template's init, builds copy it and only apply) and with the cache off
  (every build runs `terraform init`), and in the same run K bare `terraform init` + `apply` of the same files in
  a temp dir with the same Terraform and provider: medians and ratios (targets: warm / bare < 1.0, cold / bare
  <= 1.1).
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
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import httpx
import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))
from _harness import Server, free_port, median, percentile  # noqa: E402

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
                logs = client.get(f"{path}/logs").json()
                tail = "\n".join(f"  {line['stage']}: {line['output']}" for line in logs[-15:])
                raise RuntimeError(f"job {job['id']} {job['status']}: {job['error']}\n{tail}")
            return job
        time.sleep(0.01)


def parse_time(value: object) -> datetime:
    return datetime.fromisoformat(str(value).replace("Z", "+00:00"))


@dataclass
class SlipwayRun:
    builds: list[float]
    pickups: list[float]
    daemon_rss: list[float]


def slipway_run(scratch: Path, template: Path, builds: int, jobs: int, init_cache_size: str) -> SlipwayRun:
    """``builds`` workspace builds of ``template`` through the API on a server with one built-in daemon, then
    ``jobs`` empty imports for the queue pickup; the daemon keeps prepared inits up to ``init_cache_size``
    ("0": none)."""
    env = {"SLIPWAY_PROVISIONER_INIT_CACHE_SIZE": init_cache_size}
    server = Server(extra_args=("--provisioner-daemons", "1"), env=env).start()
    try:
        base = server.url
        httpx.post(
            f"{base}/api/v2/users/first", json={"username": "alice", "email": "a@example.com", "password": PASSWORD}
        )
        token = httpx.post(f"{base}/api/v2/users/login", json={"email": "a@example.com", "password": PASSWORD}).json()
        client = httpx.Client(base_url=f"{base}/api/v2", headers={"Authorization": f"Bearer {token['session_token']}"})
        upload = client.post(
            "/files", content=pack_directory(template), headers={"Content-Type": "application/x-tar"}
        ).json()
        # Run as root, the server builds as its provisioner user: the workspaces go where that user may write.
        workspaces_root = scratch / f"slipway-{template.name}-{init_cache_size}"
        workspaces_root.mkdir(mode=0o777)
        workspaces_root.chmod(0o1777)
        variables = [{"name": "workspaces_root", "value": str(workspaces_root)}]
        version = client.post(
            "/templateversions", json={"file_id": upload["id"], "user_variable_values": variables}
        ).json()
        wait_job(client, f"/templateversions/{version['id']}")
        template_id = client.post("/templates", json={"name": "local", "version_id": version["id"]}).json()["id"]

        time.sleep(2.0)  # let the daemon settle before measuring it idle
        daemon_rss = [
            proc.memory_info().rss / 1e6
            for proc in psutil.Process(server.process.pid).children(recursive=True)  # type: ignore[union-attr]
            if proc.cmdline()[1:3] == ["-m", "workers"] or proc.cmdline()[1:4] == ["-I", "-m", "workers"]
        ]

        through_api = []
        for index in range(builds):
            began = time.perf_counter()
            workspace = client.post("/workspaces", json={"template_id": template_id, "name": f"ws{index}"}).json()
            wait_job(client, f"/workspacebuilds/{workspace['latest_build']['id']}")
            through_api.append(time.perf_counter() - began)

        pickups = []
        tiny = scratch / f"tiny-{template.name}-{init_cache_size}"
        tiny.mkdir()
        (tiny / "main.tf").write_text("# nothing to build: a job that measures the queue, not Terraform\n")
        tiny_file = client.post(
            "/files", content=pack_directory(tiny), headers={"Content-Type": "application/x-tar"}
        ).json()
        for _ in range(jobs):
            created = client.post("/templateversions", json={"file_id": tiny_file["id"]}).json()
            job = wait_job(client, f"/templateversions/{created['id']}")
            pickups.append((parse_time(job["started_at"]) - parse_time(job["created_at"])).total_seconds() * 1000)
        return SlipwayRun(through_api, pickups, daemon_rss)
    finally:
        server.stop()


def with_git_module(scratch: Path) -> tuple[Path, subprocess.Popen[bytes]]:
    """examples/local plus a module that `terraform init` fetches from a Git server, as templates get theirs
    from registry.coder.com or GitHub (`git daemon` on this machine: it has no internet). Served rather than read
    as a file:// URL, which git refuses to a provisioner user that does not own the repository."""
    repository = scratch / "modules"
    (repository / "tools").mkdir(parents=True)
    (repository / "tools" / "main.tf").write_text(
        'variable "name" {\n  type = string\n}\n'
        'resource "terraform_data" "tools" {\n  input = "tools for ${var.name}"\n}\n'
    )
    git = ["git", "-c", "user.name=bench", "-c", "user.email=bench@example.com", "-C", str(repository)]
    for step in (["init", "-q"], ["add", "."], ["commit", "-q", "-m", "tools"], ["tag", "v1.0.0"]):
        subprocess.run([*git, *step], check=True)
    port = free_port()
    server = subprocess.Popen(
        ["git", "daemon", "--export-all", "--reuseaddr", f"--base-path={scratch}", "--listen=127.0.0.1",
         f"--port={port}", str(scratch)],
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while subprocess.run(["git", "ls-remote", f"git://127.0.0.1:{port}/modules"], capture_output=True).returncode:
        if time.monotonic() > deadline:
            raise RuntimeError("git daemon did not come up")
        time.sleep(0.1)
    template = scratch / "local-with-git-module"
    shutil.copytree(EXAMPLE, template)
    (template / "tools.tf").write_text(
        'module "tools" {\n'
        f'  source = "git::git://127.0.0.1:{port}/modules//tools?ref=v1.0.0"\n'
        "  name   = data.coder_workspace.me.name\n"
        "}\n"
    )
    return template, server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--builds", type=int, default=5)
    parser.add_argument("--jobs", type=int, default=50)
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="slipway-bench-build-"))
    scratch.chmod(0o755)
    print(f"build_overhead: {args.builds} builds per case, {find_terraform().kind}, 1 idle built-in daemon", flush=True)
    with_module, git_server = with_git_module(scratch)
    try:
        for label, template in (("examples/local", EXAMPLE), ("examples/local + a Git module", with_module)):
            cold = slipway_run(scratch, template, args.builds, 0, "0")
            warm = slipway_run(scratch, template, args.builds, args.jobs if template == EXAMPLE else 0, "1GiB")
            bare = bare_terraform_runs(args.builds, scratch, template)
            print(f"{label}:")
            for case, runs in (("Slipway, init cache warm", warm.builds), ("Slipway, init cache off (cold)",
                               cold.builds), ("bare terraform init + apply", bare)):  # fmt: skip
                print(f"  {case + ':':<32} median {median(runs):.2f} s  ({', '.join(f'{t:.2f}' for t in runs)})")
            print(f"  warm / bare: {median(warm.builds) / median(bare):.2f}   (target < 1.0)")
            print(f"  cold / bare: {median(cold.builds) / median(bare):.2f}   (target <= 1.1)", flush=True)
            if warm.pickups:
                p50, p95 = percentile(warm.pickups, 0.5), percentile(warm.pickups, 0.95)
                print(f"  queue pickup over {len(warm.pickups)} jobs: p50 {p50:.0f} ms, p95 {p95:.0f} ms   "
                      "(target p95 <= 100 ms)")  # fmt: skip
                print(f"  idle daemon RSS: {', '.join(f'{r:.0f} MB' for r in warm.daemon_rss)}   (target <= 100 MB)")
    finally:
        git_server.terminate()
        git_server.wait(timeout=10)
        shutil.rmtree(scratch, ignore_errors=True)


def bare_terraform_runs(count: int, scratch: Path, template: Path) -> list[float]:
    """The same template, the same Terraform and provider mirror, run by hand: what Terraform alone costs."""
    cache = scratch / f"bare-cache-{template.name}"
    cache.mkdir()
    access_url = "http://127.0.0.1:1"  # the agent is never started: the URL is only written into its script
    binary = find_terraform()
    times = []
    for index in range(count):
        workdir = scratch / f"bare-{template.name}-{index}"
        shutil.copytree(template, workdir)
        coder_env = build_coder_env(
            access_url=access_url, transition="start", workspace_name=f"bare{index}", workspace_id=f"id{index}",
            build_id="b", owner_name="alice", owner_id="u", owner_email="a@example.com",
        )  # fmt: skip
        env = terraform_environment(
            os.environ, coder_env, cache_dir=cache, cli_config_file=install_coder_provider(cache)
        )
        var = f"workspaces_root={scratch / f'bare-workspaces-{template.name}'}"
        began = time.perf_counter()
        for step in (["init", "-no-color"], ["apply", "-auto-approve", "-json", "-var", var]):
            subprocess.run(binary.argv(*step, "-input=false"), cwd=workdir, env=env, check=True, capture_output=True)
        times.append(time.perf_counter() - began)
        destroy = binary.argv("destroy", "-auto-approve", "-input=false", "-var", var)
        subprocess.run(destroy, cwd=workdir, env=env, check=True, capture_output=True)
    return times


if __name__ == "__main__":
    main()
