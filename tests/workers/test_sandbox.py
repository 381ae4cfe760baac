"""The Landlock sandbox of built-in daemons: the rules it builds, and what a confined process can still do."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

from protocol.sandbox import SandboxPolicy
from tests.support.daemon_user import AS_ROOT, DAEMON_USER, REPO, prepare_daemon_user, shared_dir
from workers.sandbox import READ_ONLY, grants_except, landlock_abi


def test_rules_allow_everything_beside_the_protected_path_and_nothing_above_it(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "a" / "data").mkdir(parents=True)
    (root / "a" / "beside").mkdir()
    (root / "a" / "file").write_text("x")
    (root / "c").mkdir()
    (root / "to-a").symlink_to(root / "a")  # would open the protected path's parent up again
    (root / "to-data").symlink_to(root / "a" / "data")
    rules = grants_except(str(root), READ_ONLY, {str(root / "a" / "data")})
    assert sorted(path for path, _ in rules) == sorted(str(root / name) for name in ("a/beside", "a/file", "c"))
    assert {rights for _, rights in rules} == {READ_ONLY}


def test_rules_for_a_root_outside_or_inside_the_protected_path(tmp_path: Path) -> None:
    (tmp_path / "data" / "inner").mkdir(parents=True)
    (tmp_path / "other").mkdir()
    protected = {str(tmp_path / "data")}
    assert grants_except(str(tmp_path / "other"), READ_ONLY, protected) == [(str(tmp_path / "other"), READ_ONLY)]
    assert grants_except(str(tmp_path / "data" / "inner"), READ_ONLY, protected) == []


CONFINED = """
import json, os, sys
from protocol.sandbox import SandboxPolicy
from workers.sandbox import confine
base = sys.argv[1]
confine(SandboxPolicy.loads(sys.argv[2]))
def attempt(action):
    try:
        action()
        return "allowed"
    except OSError as exc:
        return exc.strerror
print(json.dumps({
    "read protected": attempt(lambda: open(base + "/data/secret").read()),
    "list protected": attempt(lambda: os.listdir(base + "/data")),
    "write protected": attempt(lambda: open(base + "/data/new", "w").close()),
    "write writable": attempt(lambda: open(base + "/cache/new", "w").close()),
    "write elsewhere": attempt(lambda: open(base + "/elsewhere/new", "w").close()),
    "read elsewhere": attempt(lambda: open(base + "/elsewhere/file").read()),
    # Signals stay allowed: a stop build on another daemon (another sandbox) must stop a local workspace.
    "signal the parent": attempt(lambda: os.kill(os.getppid(), 0)),
}))
"""


def test_a_confined_process_cannot_touch_the_protected_path(tmp_path: Path) -> None:
    assert landlock_abi() >= 1, "this test needs a kernel with Landlock, as CI's has"
    for name in ("data", "cache", "elsewhere"):
        (tmp_path / name).mkdir()
    (tmp_path / "data" / "secret").write_text("s3cret")
    (tmp_path / "elsewhere" / "file").write_text("fine")
    policy = SandboxPolicy(protected=(str(tmp_path / "data"),), writable=(str(tmp_path / "cache"),))
    result = subprocess.run(
        [sys.executable, "-c", CONFINED, str(tmp_path), policy.dumps()],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parent.parent.parent,
    )
    outcomes = json.loads(result.stdout)
    denied = "Permission denied"
    assert outcomes["read protected"] == outcomes["list protected"] == outcomes["write protected"] == denied
    assert outcomes["write elsewhere"] == denied  # read-only outside the writable roots
    assert outcomes["write writable"] == outcomes["read elsewhere"] == "allowed"
    assert outcomes["signal the parent"] == "allowed"
    assert not (tmp_path / "data" / "new").exists()


SLEEPER = """
import sys, time
from protocol.sandbox import SandboxPolicy
from workers.sandbox import confine
confine(SandboxPolicy.loads(sys.argv[1]))
print("confined", flush=True)
time.sleep(60)
"""
STOPPER = """
import os, signal, sys
from protocol.sandbox import SandboxPolicy
from workers.sandbox import confine
confine(SandboxPolicy.loads(sys.argv[1]))
os.kill(int(sys.argv[2]), signal.SIGTERM)
"""


def test_a_daemon_can_stop_what_another_daemon_started(tmp_path: Path) -> None:
    """Two daemons are two sandboxes: the stop build of a local workspace may run on the other one."""
    (tmp_path / "data").mkdir()
    policy = SandboxPolicy(protected=(str(tmp_path / "data"),), writable=(str(tmp_path),)).dumps()
    repo = Path(__file__).resolve().parent.parent.parent
    with subprocess.Popen(
        [sys.executable, "-c", SLEEPER, policy], stdout=subprocess.PIPE, text=True, cwd=repo
    ) as sleeper:
        try:
            assert sleeper.stdout is not None and sleeper.stdout.readline().strip() == "confined"
            stopper = subprocess.run(
                [sys.executable, "-c", STOPPER, policy, str(sleeper.pid)], capture_output=True, text=True, cwd=repo
            )
            assert stopper.returncode == 0, stopper.stderr
            assert sleeper.wait(timeout=30) == -15
        finally:
            sleeper.kill()


PROBE = """
import sys
from protocol.sandbox import SandboxPolicy
from workers.sandbox import confine
confine(SandboxPolicy.loads(sys.argv[1]))
import probe_after_confinement
print(probe_after_confinement.ANSWER)
"""


def test_code_beside_the_data_dir_still_loads_when_the_daemon_cannot_list_their_parent() -> None:
    """`make run` as root: the data dir is /root/.local/share/slipway, and the interpreter may live in /root too
    (pyenv), where the daemon's user may traverse but not list. Modules imported after confinement must load."""
    prepare_daemon_user()
    home = shared_dir() / f"home-{uuid.uuid4().hex[:8]}"
    (home / "data").mkdir(parents=True)
    (home / "code").mkdir()
    (home / "code" / "probe_after_confinement.py").write_text("ANSWER = 42\n")
    home.chmod(0o711 if AS_ROOT else 0o311)  # traversable, not listable (by the daemon's user; root lists anyway)
    policy = SandboxPolicy(protected=(str(home / "data"),), writable=None)
    result = subprocess.run(
        [sys.executable, "-c", PROBE, policy.dumps()],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={"PYTHONPATH": f"{REPO}{os.pathsep}{home / 'code'}"},
        user=DAEMON_USER if AS_ROOT else None,
    )
    assert result.returncode == 0 and result.stdout.strip() == "42", result.stderr
