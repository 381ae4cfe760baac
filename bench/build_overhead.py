"""Issue 3 benchmark: what Slipway adds on top of Terraform for a build, how fast an idle daemon picks a job
up, and what an idle daemon costs in memory.

- K workspace builds through the API (from sending the request to the job's completed_at) with the daemon's init
  cache warm (issue 18: the import prepared the template's init; builds copy it and only apply) and with the cache
  off (every build runs `terraform init`), and K bare `terraform init` + `apply` of the same files in a temp dir
  with the same Terraform and provider, interleaved in one run: medians and ratios (issue 43's targets: warm / bare
  <= 0.7, cold / bare <= 1.0), and each build's phases (request, queue pickup, setup, each Terraform stage, between
  stages, finish) from the server's job record and the daemon's stage timings. Twice: examples/local, and
  examples/local with a module `terraform init` fetches from Git (as registry modules are fetched).
  The bare runs start the provider as Terraform always does; Slipway's daemons hand Terraform their warm provider
  zygote (workers/provider_zygote.py).
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
from typing import Any

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
        # Not faster: on a 2-core machine a tight poll takes CPU from the build it is waiting for. The time itself
        # comes from the job's completed_at, not from when the poll saw it.
        time.sleep(0.1)


def parse_time(value: object) -> datetime:
    return datetime.fromisoformat(str(value).replace("Z", "+00:00"))


class SlipwayDeployment:
    """A server with one built-in daemon that keeps prepared inits up to ``init_cache_size`` ("0": none), with
    ``template`` imported (the import itself prepares the init)."""

    def __init__(self, scratch: Path, template: Path, init_cache_size: str, env: dict[str, str] | None = None) -> None:
        self.scratch, self.label = scratch, f"{template.name}-{init_cache_size}"
        self.workspace_ids: list[str] = []
        self.server = Server(
            extra_args=("--provisioner-daemons", "1"),
            env={"SLIPWAY_PROVISIONER_INIT_CACHE_SIZE": init_cache_size, **(env or {})},
        ).start()
        base = self.server.url
        httpx.post(
            f"{base}/api/v2/users/first", json={"username": "alice", "email": "a@example.com", "password": PASSWORD}
        )
        token = httpx.post(f"{base}/api/v2/users/login", json={"email": "a@example.com", "password": PASSWORD}).json()
        self.client = httpx.Client(
            base_url=f"{base}/api/v2", headers={"Authorization": f"Bearer {token['session_token']}"}
        )
        upload = self.client.post(
            "/files", content=pack_directory(template), headers={"Content-Type": "application/x-tar"}
        ).json()
        # Run as root, the server builds as its provisioner user: the workspaces go where that user may write.
        workspaces_root = scratch / f"slipway-{self.label}"
        workspaces_root.mkdir(mode=0o777)
        workspaces_root.chmod(0o1777)
        variables = [{"name": "workspaces_root", "value": str(workspaces_root)}]
        version = self.client.post(
            "/templateversions", json={"file_id": upload["id"], "user_variable_values": variables}
        ).json()
        wait_job(self.client, f"/templateversions/{version['id']}")
        template = self.client.post("/templates", json={"name": "local", "version_id": version["id"]})
        if template.status_code != 201:
            raise RuntimeError(f"creating the template failed: {template.text}")
        self.template_id = template.json()["id"]

    def build(self, index: int) -> tuple[float, dict[str, float]]:
        """Seconds from sending the create request to the build's completed_at, and where they went (phases)."""
        began = time.time()  # wall clock, as the server's timestamps are (same machine)
        workspace = self.client.post("/workspaces", json={"template_id": self.template_id, "name": f"ws{index}"})
        self.workspace_ids.append(workspace.json()["id"])
        build_id = workspace.json()["latest_build"]["id"]
        job = wait_job(self.client, f"/workspacebuilds/{build_id}")
        timings = self.client.get(f"/workspacebuilds/{build_id}/timings").json()
        return parse_time(job["completed_at"]).timestamp() - began, phases(began, timings)

    def daemon_rss(self) -> list[float]:
        return [
            proc.memory_info().rss / 1e6
            for proc in psutil.Process(self.server.process.pid).children(recursive=True)  # type: ignore[union-attr]
            if proc.cmdline()[1:3] == ["-m", "workers"] or proc.cmdline()[1:4] == ["-I", "-m", "workers"]
        ]

    def zygote_rss(self) -> list[float]:
        """The daemons' warm providers (workers/provider_zygote.py): the memory the speed costs."""
        return [
            proc.memory_info().rss / 1e6
            for proc in psutil.Process(self.server.process.pid).children(recursive=True)  # type: ignore[union-attr]
            if any("workers.coder_provider.zygote" in part for part in proc.cmdline())
        ]

    def pickups(self, jobs: int) -> list[float]:
        """Milliseconds from creation to start of ``jobs`` empty imports, one at a time."""
        tiny = self.scratch / f"tiny-{self.label}"
        tiny.mkdir()
        (tiny / "main.tf").write_text("# nothing to build: a job that measures the queue, not Terraform\n")
        tiny_file = self.client.post(
            "/files", content=pack_directory(tiny), headers={"Content-Type": "application/x-tar"}
        ).json()
        pickups = []
        for _ in range(jobs):
            created = self.client.post("/templateversions", json={"file_id": tiny_file["id"]}).json()
            job = wait_job(self.client, f"/templateversions/{created['id']}")
            pickups.append((parse_time(job["started_at"]) - parse_time(job["created_at"])).total_seconds() * 1000)
        return pickups

    def stop(self) -> None:
        """Delete the workspaces first: each runs an agent process on this machine, which outlives the server."""
        try:
            for workspace_id in self.workspace_ids:
                build = self.client.post(f"/workspaces/{workspace_id}/builds", json={"transition": "delete"})
                wait_job(self.client, f"/workspacebuilds/{build.json()['id']}")
        finally:
            self.client.close()
            self.server.stop()


def phases(began: float, timings: dict[str, Any]) -> dict[str, float]:
    """Seconds of each phase of one build, from the server's job record and the daemon's stage bars (the
    /timings API): the request, queue pickup (created to started: the queue and the acquire), setup (started to
    the first stage: archive unpack, provider install, the init cache's key), each Terraform stage (init is the
    init cache's link when it is warm), what ran between stages, and the finish (the last stage's end to
    completed: state and resources parsed, logs flushed, the outcome reported)."""
    job = timings["job"]
    created, started = parse_time(job["queued_at"]).timestamp(), parse_time(job["started_at"]).timestamp()
    completed = parse_time(job["completed_at"]).timestamp()
    bars = sorted(
        (parse_time(bar["started_at"]).timestamp(), parse_time(bar["ended_at"]).timestamp(), bar["stage"])
        for bar in timings["provisioner_timings"]
        if bar["resource"] == ""
    )
    result = {"request": created - began, "queue pickup": started - created}
    cursor = started
    for start, end, stage in bars:
        key = "setup" if cursor == started else "between stages"
        result[key] = result.get(key, 0.0) + max(0.0, start - cursor)
        result[stage] = result.get(stage, 0.0) + (end - start)
        cursor = end
    result["finish"] = completed - cursor
    return result


def print_phases(runs: dict[str, list[dict[str, float]]]) -> None:
    """Each phase's median per case, in the order the phases happen."""
    order: list[str] = []
    for per_build in runs.values():
        for build in per_build:
            order.extend(name for name in build if name not in order)
    print(f"  {'phase (median s)':<32} " + " ".join(f"{case:>7}" for case in runs))
    for name in order:
        cells = [median([build.get(name, 0.0) for build in per_build]) for per_build in runs.values()]
        print(f"  {name:<32} " + " ".join(f"{cell:7.3f}" for cell in cells))


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
            cold = SlipwayDeployment(scratch, template, "0")
            warm = SlipwayDeployment(scratch, template, "1GiB")
            bare = BareTerraform(scratch, template)
            runs: dict[str, list[float]] = {"warm": [], "cold": [], "bare": []}
            breakdown: dict[str, list[dict[str, float]]] = {"warm": [], "cold": []}
            try:
                time.sleep(2.0)  # let the daemons settle (and be measured idle)
                rss, zygote_rss = warm.daemon_rss(), warm.zygote_rss()
                for index in range(args.builds):  # interleaved, so that the machine's drift favours none of them
                    for key, deployment in (("warm", warm), ("cold", cold)):
                        took, where = deployment.build(index)
                        runs[key].append(took)
                        breakdown[key].append(where)
                    runs["bare"].append(bare.build(index))
                pickups = warm.pickups(args.jobs) if template == EXAMPLE else []
            finally:
                cold.stop()
                warm.stop()
            print(f"{label}:")
            for case, key in (("Slipway, init cache warm", "warm"), ("Slipway, init cache off (cold)", "cold"),
                              ("bare terraform init + apply", "bare")):  # fmt: skip
                times = runs[key]
                print(f"  {case + ':':<32} median {median(times):.2f} s  ({', '.join(f'{t:.2f}' for t in times)})")
            print(f"  warm / bare: {median(runs['warm']) / median(runs['bare']):.2f}   (target <= 0.7)")
            print(f"  cold / bare: {median(runs['cold']) / median(runs['bare']):.2f}   (target <= 1.0)", flush=True)
            print_phases(breakdown)
            if pickups:
                p50, p95 = percentile(pickups, 0.5), percentile(pickups, 0.95)
                print(f"  queue pickup over {len(pickups)} jobs: p50 {p50:.0f} ms, p95 {p95:.0f} ms   "
                      "(target p95 <= 100 ms)")  # fmt: skip
                print(f"  idle daemon RSS: {', '.join(f'{r:.0f} MB' for r in rss)}   (target <= 100 MB)")
                print(f"  its provider zygote's RSS: {', '.join(f'{r:.0f} MB' for r in zygote_rss)}")
    finally:
        git_server.terminate()
        git_server.wait(timeout=10)
        shutil.rmtree(scratch, ignore_errors=True)


class BareTerraform:
    """The same template, the same Terraform and provider mirror, run by hand: what Terraform alone costs."""

    def __init__(self, scratch: Path, template: Path) -> None:
        self.scratch, self.template = scratch, template
        self.cache = scratch / f"bare-cache-{template.name}"
        self.cache.mkdir()
        self.binary = find_terraform()
        self.var = f"workspaces_root={scratch / f'bare-workspaces-{template.name}'}"

    def build(self, index: int) -> float:
        """Seconds of `terraform init` + `terraform apply` in a fresh copy of the template (then destroyed)."""
        workdir = self.scratch / f"bare-{self.template.name}-{index}"
        shutil.copytree(self.template, workdir)
        coder_env = build_coder_env(
            access_url="http://127.0.0.1:1", transition="start", workspace_name=f"bare{index}",
            workspace_id=f"id{index}", build_id="b", owner_name="alice", owner_id="u", owner_email="a@example.com",
        )  # fmt: skip
        env = terraform_environment(
            os.environ,
            coder_env,
            plugin_cache=self.cache / "plugins",
            cli_config_file=install_coder_provider(self.cache),
        )
        began = time.perf_counter()
        for step in (["init", "-no-color"], ["apply", "-auto-approve", "-json", "-var", self.var]):
            run = self.binary.argv(*step, "-input=false")
            subprocess.run(run, cwd=workdir, env=env, check=True, capture_output=True)
        took = time.perf_counter() - began
        destroy = self.binary.argv("destroy", "-auto-approve", "-input=false", "-var", self.var)
        subprocess.run(destroy, cwd=workdir, env=env, check=True, capture_output=True)
        return took


if __name__ == "__main__":
    main()
