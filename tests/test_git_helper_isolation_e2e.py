"""Two people's workspaces as one OS user, all real: `slipway server` with built-in daemons, real Terraform, and a
template like examples/local (every workspace a process of the daemons' user) that sets no agent directory, so
both agents start with the daemon's own TMPDIR (issue 34, H0 and H1).

Each agent must get a runtime directory and Git helper socket of its own, and a process of one workspace that
connects to the other's socket (the same OS user may) must be refused: it lacks that agent's secret. Its own
workspace's git helpers still work.
"""

from __future__ import annotations

import json
import stat
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.support.deployment import EXAMPLE, Deployment, running_deployment

pytestmark = pytest.mark.e2e

LOG_DIR_LINE = 'SLIPWAY_AGENT_LOG_DIR = "${local.dir}/.slipway-agent"'
# Which processes under a directory have an environment this process may read, and which of those hold a token.
TOKENS = """
import os, sys
inspected, found = 0, []
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        if not os.readlink(f"/proc/{pid}/cwd").startswith(sys.argv[1]):
            continue
        with open(f"/proc/{pid}/environ", "rb") as environ:
            text = environ.read()
    except OSError:
        continue
    inspected += 1
    if b"CODER_AGENT_TOKEN=" in text or b"SLIPWAY_AGENT_TOKEN=" in text:
        found.append(pid)
print(inspected, *found)
"""
# What a process in a workspace can do with any socket path it learns: one request, with or without a secret.
ASK = """
import json, socket, sys
request = {"op": "gitsshkey"}
if len(sys.argv) > 2:
    request["secret"] = sys.argv[2]
with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
    connection.connect(sys.argv[1])
    connection.sendall(json.dumps(request).encode() + b"\\n")
    print(connection.makefile().readline().strip())
"""


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    with running_deployment(tmp_path_factory.mktemp("git-helper-isolation")) as deployment:
        main_tf = (EXAMPLE / "main.tf").read_text()
        assert LOG_DIR_LINE in main_tf
        template = deployment.tmp / "no-agent-dir"
        template.mkdir()
        (template / "main.tf").write_text(main_tf.replace(LOG_DIR_LINE, ""))
        pushed = deployment.cli(
            "alice", "templates", "push", "no-agent-dir", "-d", str(template),
            "--variable", f"workspaces_root={deployment.workspaces_root}",
        )  # fmt: skip
        assert pushed.returncode == 0, pushed.stdout + pushed.stderr
        for owner in ("carol", "dave"):
            created = deployment.cli(owner, "create", "ws", "-t", "no-agent-dir")
            assert created.returncode == 0, created.stdout + created.stderr
        for owner in ("carol", "dave"):
            deployment.wait_ready(owner, "ws", timeout=120)
            (deployment.directory(owner, "ws") / "ask.py").write_text(ASK)
            (deployment.directory(owner, "ws") / "tokens.py").write_text(TOKENS)
        yield deployment


def in_workspace(deployment: Deployment, owner: str, command: str) -> str:
    result = deployment.cli(owner, "ssh", "ws", command, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    return str(result.stdout.strip())


def helper_of(deployment: Deployment, owner: str) -> tuple[Path, str]:
    """The socket and secret that the owner's sessions get from their agent."""
    socket_path, _, secret = in_workspace(
        deployment, owner, 'printf "%s|%s" "$SLIPWAY_AGENT_GIT_SOCKET" "$SLIPWAY_AGENT_GIT_SECRET"'
    ).partition("|")
    return Path(socket_path), secret


def ask(deployment: Deployment, owner: str, socket_path: Path, *secret: str) -> dict[str, object]:
    line = in_workspace(deployment, owner, " ".join([sys.executable, "ask.py", str(socket_path), *secret]))
    answer: dict[str, object] = json.loads(line.splitlines()[-1])
    return answer


def test_two_agents_of_one_daemon_each_get_their_own_private_runtime_directory(deployment: Deployment) -> None:
    (carol_socket, carol_secret), (dave_socket, dave_secret) = (
        helper_of(deployment, "carol"),
        helper_of(deployment, "dave"),
    )
    assert carol_socket != dave_socket and carol_secret != dave_secret
    assert carol_socket.parent.parent == dave_socket.parent.parent, "both under the daemon's one TMPDIR"
    for socket_path in (carol_socket, dave_socket):
        directory = socket_path.parent.stat()
        assert stat.S_IMODE(directory.st_mode) == 0o700 and stat.S_ISSOCK(socket_path.stat().st_mode)
        log = (socket_path.parent / "slipway-agent.log").read_text()
        assert log.count("git helper listening on") == 1 and f"listening on {socket_path}" in log
    # One OS user runs both: which is why the socket's mode alone cannot keep one from the other.
    assert carol_socket.stat().st_uid == dave_socket.stat().st_uid


def test_a_workspace_cannot_take_another_owner_s_git_credentials_from_their_agent(deployment: Deployment) -> None:
    (carol_socket, carol_secret), (dave_socket, _) = helper_of(deployment, "carol"), helper_of(deployment, "dave")
    with deployment.api("carol") as api:
        carol_key = api.get("/users/me/gitsshkey").json()["public_key"]
    with deployment.api("dave") as api:
        dave_key = api.get("/users/me/gitsshkey").json()["public_key"]
    # Carol's process connects to dave's socket (it may: same OS user), without a secret or with her own.
    for refused in (ask(deployment, "carol", dave_socket), ask(deployment, "carol", dave_socket, carol_secret)):
        assert refused.get("status") == 403 and "ok" not in refused, refused
        assert "serves only the processes of its own workspace" in str(refused["error"])
    assert "refused a git helper request" in (dave_socket.parent / "slipway-agent.log").read_text()
    # Her own agent answers her own processes with her own key.
    mine = ask(deployment, "carol", carol_socket, carol_secret)
    assert isinstance(mine.get("ok"), dict) and mine["ok"]["public_key"] == carol_key != dave_key, mine
    # The helpers git runs work as they are in her sessions, and point nowhere else even when told to.
    prompt = "\"Username for 'https://nowhere.example': \""
    own = deployment.cli("carol", "ssh", "ws", f"slipway-gitaskpass {prompt}", timeout=120)
    assert own.returncode == 1 and "No Git provider on this server serves https://nowhere.example" in own.stderr
    other = deployment.cli("carol", "ssh", "ws", f"SLIPWAY_AGENT_GIT_SOCKET={dave_socket} slipway-gitaskpass {prompt}")
    assert other.returncode == 1 and "serves only the processes of its own workspace" in other.stderr, other.stderr


def agent_pid(deployment: Deployment, owner: str) -> int:
    directory = str(deployment.directory(owner, "ws"))
    for process in psutil.process_iter(["cmdline", "cwd"]):
        if (process.info["cmdline"] or [])[-2:] == ["-m", "agent"] and process.info["cwd"] == directory:
            return int(process.pid)
    raise AssertionError(f"no agent runs in {directory}")


def test_no_process_of_the_shared_user_shows_an_agent_s_token(deployment: Deployment) -> None:
    """The agent's token would open the server's agent API (the owner's Git tokens) to whoever reads it: the agent
    hides its /proc files even from its own workspace's processes, and the process that holds the workspace open
    does not keep the token."""
    for owner in ("carol", "dave"):
        read = deployment.cli("carol", "ssh", "ws", f"cat /proc/{agent_pid(deployment, owner)}/environ")
        assert read.returncode != 0 and "Permission denied" in read.stderr, read.stdout + read.stderr
    # Every process of this deployment's workspaces whose environment carol's session can read (other workspaces of
    # this machine's daemon user, other deployments', are not this test's to judge).
    readable = in_workspace(deployment, "carol", f"{sys.executable} tokens.py {deployment.workspaces_root}")
    inspected, *with_token = readable.split()
    assert with_token == [] and int(inspected) >= 2, readable  # both workspaces' `sleep`, carol's session...
