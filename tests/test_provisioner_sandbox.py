"""Built-in daemons cannot reach the server's data: a template admin must not become an owner through a template.

A template whose `local-exec` goes after the data dir (database, secret key, Redis, the server's processes) is
built by a real `slipway server` with built-in daemons and real Terraform, twice: with the server run as root
(the daemons run as the user slipway-provisioner) and with the server run as an unprivileged user (the daemons
are confined by Landlock). Every attempt must be refused while the `local` example still builds and its agent
connects. These tests run as root, as CI does: the second server is started as `nobody`.
"""

from __future__ import annotations

import os
import pwd
import stat
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import psutil
import pytest

from app.server.builtin_daemons import DaemonSetupError, first_blocked_for, plan_daemon_launch
from tests.conftest import make_settings
from tests.support.daemon_user import AS_ROOT, DAEMON_USER, daemon_writable_dir, shared_dir
from tests.support.deployment import Deployment, running_deployment
from tests.support.server import ServerProcess, run_server_once

UNPRIVILEGED = "nobody"
# Each probe prints one line "PROBE <what>: ALLOWED <what it got>" or "PROBE <what>: refused <error>".
PROBE_SCRIPT = r"""
data="$1"
py="${SLIPWAY_AGENT_PYTHON:-python3}"
probe() {
  what="$1"; shift
  if out=$("$@" 2>&1); then echo "PROBE $what: ALLOWED $out"; else echo "PROBE $what: refused $out"; fi
}
probe "read the database" head -c 16 "$data/slipway.db"
probe "read the secret key" cat "$data/secret_key"
probe "read the Redis password" cat "$data/redis_password"
probe "read the Redis log" cat "$data/redis.log"
probe "list the data dir" ls -a "$data"
probe "write into the data dir" sh -c "echo pwned > '$data/pwned'"
probe "talk to Redis" "$py" -c '
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1] + "/redis.sock")
s.sendall(b"PING\r\n")
reply = s.recv(100)
sys.exit(0 if reply.startswith(b"+PONG") else "Redis answered " + repr(reply))
' "$data"
# The server's own processes hold the database URL, the daemons' key and Redis's URL in their environment.
names='SECRET_KEY|DATABASE_URL|BUILTIN_DAEMON_PSK|PROVISIONER_DAEMON_PSK|REDIS_URL|PROVISIONER_REDIS_URL'
leaked=$(cat /proc/[0-9]*/environ 2>/dev/null | tr '\0' '\n' | grep -cE "^SLIPWAY_($names)=")
if [ "$leaked" -gt 0 ]; then echo "PROBE read the server's environment: ALLOWED $leaked settings"; \
else echo "PROBE read the server's environment: refused"; fi
"""
PROBE_TEMPLATE = """
variable "data_dir" {
  type = string
}

resource "terraform_data" "probe" {
  provisioner "local-exec" {
    command = "sh ./probe.sh '${var.data_dir}'"
  }
}
"""
PROBES = [
    "read the database",
    "read the secret key",
    "read the Redis password",
    "read the Redis log",
    "list the data dir",
    "write into the data dir",
    "talk to Redis",
    "read the server's environment",
]


def _probe_build_log(deployment: Deployment, tmp: Path) -> str:
    """Bob, a template admin, pushes the probe and builds a workspace from it; returns the build's log."""
    template = tmp / "probe-template"
    template.mkdir()
    (template / "main.tf").write_text(PROBE_TEMPLATE)
    (template / "probe.sh").write_text(PROBE_SCRIPT)
    variable = f"data_dir={deployment.server.data_dir}"
    pushed = deployment.cli("bob", "templates", "push", "probe", "-d", str(template), "--variable", variable)
    assert pushed.returncode == 0, pushed.stdout + pushed.stderr
    created = deployment.cli("bob", "create", "probe-ws", "-t", "probe", timeout=180)
    assert created.returncode == 0, created.stdout + created.stderr
    build = deployment.workspace("bob", "probe-ws")["latest_build"]
    with deployment.api("bob") as api:
        lines = api.get(f"/workspacebuilds/{build['id']}/logs").json()
    return "\n".join(line["output"] for line in lines)


def _assert_every_probe_refused(deployment: Deployment, log: str) -> None:
    outcomes = dict(
        line[line.index("PROBE ") + len("PROBE ") :].split(": ", 1) for line in log.splitlines() if "PROBE " in line
    )
    assert sorted(outcomes) == sorted(PROBES), log
    allowed = [what for what, outcome in outcomes.items() if not outcome.startswith("refused")]
    assert allowed == [], log
    data_dir = deployment.server.data_dir
    for secret_file in ("secret_key", "redis_password"):
        assert (data_dir / secret_file).read_text().strip() not in log
    assert not (data_dir / "pwned").exists()


def _assert_local_example_works(deployment: Deployment, expected_user: str) -> None:
    deployment.push_local()
    deployment.create("carol", "dev")
    deployment.wait_ready("carol", "dev", timeout=120)
    pid = int((deployment.directory("carol", "dev") / "workspace.pid").read_text())
    assert psutil.Process(pid).username() == expected_user


@pytest.fixture(scope="module")
def as_root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    assert AS_ROOT, "these tests start servers as root and as another user, as CI does: run them as root"
    with running_deployment(tmp_path_factory.mktemp("sandbox-root")) as deployment:
        yield deployment


@pytest.fixture(scope="module")
def as_unprivileged_user() -> Iterator[Deployment]:
    assert AS_ROOT, "only root can start the server as another user"
    # The server's user owns its files; pytest's own tmp dirs (0700, root's) are closed to it.
    tmp = daemon_writable_dir("sandbox-user", UNPRIVILEGED)
    env = {"HOME": str(tmp), "SLIPWAY_PROVISIONER_CACHE_DIR": str(tmp / "cache")}
    with running_deployment(tmp, env=env, user=UNPRIVILEGED) as deployment:
        yield deployment


def test_server_run_as_root_runs_daemons_as_their_own_user(as_root: Deployment) -> None:
    daemons = [p for p in as_root.server.tree() if p.cmdline()[-3:] == ["-I", "-m", "workers"]]
    assert len(daemons) == 2 and {daemon.username() for daemon in daemons} == {DAEMON_USER}
    assert "run the builds, as the user slipway-provisioner" in as_root.server.log()


def test_template_on_root_servers_daemons_cannot_reach_the_data_dir(as_root: Deployment, tmp_path: Path) -> None:
    _assert_every_probe_refused(as_root, _probe_build_log(as_root, tmp_path))


def test_local_example_still_works_on_root_servers_daemons(as_root: Deployment) -> None:
    _assert_local_example_works(as_root, DAEMON_USER)


def test_template_on_sandboxed_daemons_cannot_reach_the_data_dir(as_unprivileged_user: Deployment) -> None:
    deployment = as_unprivileged_user
    assert "run the builds, in a Landlock sandbox" in deployment.server.log()
    _assert_every_probe_refused(deployment, _probe_build_log(deployment, deployment.tmp))


def test_local_example_still_works_on_sandboxed_daemons(as_unprivileged_user: Deployment) -> None:
    _assert_local_example_works(as_unprivileged_user, UNPRIVILEGED)


def _mode(path: Path) -> str:
    return oct(stat.S_IMODE(path.stat().st_mode))


def test_data_dir_and_its_files_are_private(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with ServerProcess(data, "--provisioner-daemons", "0") as server:
        modes = {path.name: _mode(path) for path in data.iterdir() if path.is_file()}
        assert _mode(data) == "0o700"
        for name in ("slipway.db", "secret_key", "redis_password", "redis.log", "redis.pid"):
            assert modes.pop(name) == "0o600", name
        assert set(modes.values()) <= {"0o600"}, modes  # the database's -wal and -shm files, when there
        assert "were open to other users" not in server.log()


def test_an_open_data_dir_is_tightened_at_start(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    data.chmod(0o755)
    key = data / "secret_key"
    key.write_text("an-existing-key")
    key.chmod(0o644)
    with ServerProcess(data, "--provisioner-daemons", "0") as server:
        assert (_mode(data), _mode(key)) == ("0o700", "0o600")
        assert f"slipway: 2 path(s) in {data} were open to other users; made them private" in server.log()


def test_a_cache_dir_inside_the_data_dir_is_refused(tmp_path: Path) -> None:
    data = tmp_path / "data"
    result = run_server_once("--data-dir", str(data), "--provisioner-cache-dir", str(data / "cache"))
    assert result.returncode == 2
    assert result.stderr.startswith(f"slipway: the provisioner cache dir {data / 'cache'} lies inside the data dir")
    assert result.stderr.strip().count("\n") == 0


def test_a_cache_dir_the_daemon_user_cannot_reach_is_one_clear_line(tmp_path: Path) -> None:
    # pytest's tmp dirs are 0700 and root's: the daemons' user cannot get through to a cache dir in there. The first
    # closed one from the root down is named (pytest-of-<user>, or a parallel worker's dir below it).
    closed = next(parent for parent in reversed(tmp_path.parents) if not parent.stat().st_mode & 0o001)
    result = run_server_once("--data-dir", str(tmp_path / "data"), "--provisioner-cache-dir", str(tmp_path / "cache"))
    assert result.returncode == 2
    expected = f"slipway: the provisioner user {DAEMON_USER} cannot reach its cache dir at {tmp_path / 'cache'}: "
    assert result.stderr.startswith(expected + f"{closed} (mode 0700) is closed to it"), result.stderr
    assert f"setfacl -m u:{DAEMON_USER}:x {closed}" in result.stderr
    assert result.stderr.strip().count("\n") == 0


def test_a_data_dir_under_tmp_is_said_at_start_naming_every_directory_closed_to_new_entries(tmp_path: Path) -> None:
    """Landlock closes every ancestor of the data dir, not only its parent: with the data dir in /tmp, templates
    cannot create entries in /tmp itself (a workspace's `mktemp` fails), and the server says so when it starts."""
    data = Path("/tmp") / f"slipway-notice-{tmp_path.name}" / "deep" / "data"
    said: list[str] = []
    settings = make_settings(data, f"sqlite:///{data / 'slipway.db'}", "redis://127.0.0.1:1/0")
    plan_daemon_launch(
        replace(settings, provisioner_grant_access=True, provisioner_cache_dir=shared_dir() / f"cache-{tmp_path.name}"),
        redis_socket=None,
        echo=said.append,
    )
    notices = [line for line in said if "cannot create files or directories directly in" in line]
    top = data.parent.parent
    assert notices == [
        f"slipway: {data} lies in /tmp, so templates on the built-in daemons cannot create files or directories "
        f"directly in /tmp, {top}, {top / 'deep'}: the sandbox closes every directory above the data dir (and its "
        "secret files) to new entries. Builds get a TMPDIR of their own; if workspaces of local-process templates "
        "need /tmp, keep the data dir elsewhere (--data-dir)."
    ]
    elsewhere = make_settings(Path("/srv") / f"slipway-{tmp_path.name}", "sqlite://", "redis://127.0.0.1:1/0")
    said.clear()
    plan_daemon_launch(
        replace(elsewhere, provisioner_grant_access=True, provisioner_cache_dir=shared_dir() / f"c2-{tmp_path.name}"),
        redis_socket=None,
        echo=said.append,
    )
    assert not [line for line in said if "cannot create files" in line]


def test_grant_access_lets_the_daemon_user_through_and_nothing_more(tmp_path: Path) -> None:
    # What `make run` does as root when Slipway sits under a directory closed to other users (/root is 0700).
    closed = shared_dir() / f"closed-{tmp_path.name}"
    (closed / "inside").mkdir(parents=True)
    closed.chmod(0o700)
    (closed / "secret").write_text("root's own")
    (closed / "secret").chmod(0o600)
    cache_dir = closed / "inside" / "cache"
    settings = make_settings(
        tmp_path / "data",
        f"sqlite:///{tmp_path / 'data' / 'slipway.db'}",
        "redis://127.0.0.1:1/0",
        provisioner_cache_dir=str(cache_dir),
    )
    with pytest.raises(DaemonSetupError, match=f"{closed} \\(mode 0700\\) is closed to it.*--provisioner-grant-access"):
        plan_daemon_launch(settings, redis_socket=None, echo=lambda line: None)

    said: list[str] = []
    launch = plan_daemon_launch(replace(settings, provisioner_grant_access=True), redis_socket=None, echo=said.append)
    assert launch.user is not None and launch.user.pw_name == DAEMON_USER
    assert said[0] == f"slipway: let {DAEMON_USER} traverse {closed} (ACL u:{DAEMON_USER}:x)."
    account = pwd.getpwnam(DAEMON_USER)
    assert first_blocked_for(account, [("the cache dir", cache_dir, os.R_OK | os.W_OK | os.X_OK)]) is None
    # Traversal only: it still cannot list the directory or read what the files' own modes keep from it.
    assert first_blocked_for(account, [("the secret", closed / "secret", os.R_OK)]) == (
        "the secret",
        str(closed / "secret"),
        str(closed / "secret"),
    )
    assert first_blocked_for(account, [("the listing", closed, os.R_OK)]) is not None
    assert stat.S_IMODE(closed.stat().st_mode) == 0o710  # the mode shows the ACL's mask: x for the one user
