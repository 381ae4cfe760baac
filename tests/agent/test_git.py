"""The agent's Git helper: git's prompts answered through the helper socket, the wrappers git runs, and the
environment that points git at them. The server is a local stand-in here (httpx's MockTransport behind the
agent's real API client); test_external_auth_e2e.py runs the whole chain with a real server and real git."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import stat
import subprocess
import tempfile
import threading
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest

from agent import git, git_helper
from agent.api import AgentAPI
from agent.environment import build_environment
from agent.git_helper import GitHelperServer
from protocol.agentapi import Manifest

LINKED = {"id": "gh", "display_name": "GitHub", "access_token": "tok", "username": "x-access-token", "password": "tok",
          "token_extra": {"token_type": "bearer"}}  # fmt: skip
NOT_LINKED = {"id": "gh", "display_name": "GitHub", "url": "https://slipway.test/external-auth/gh"}

Answer = Callable[[httpx.Request], httpx.Response]
T = TypeVar("T")


class Helper:
    """The agent's helper socket served on a loop of its own, its server calls answered by ``answer``. While it
    serves, this process's environment holds its secret, as the environment of the agent's children does."""

    def __init__(self, socket_path: Path, answer: Answer = lambda request: httpx.Response(200, json=LINKED)) -> None:
        self.requests: list[httpx.Request] = []

        def record(request: httpx.Request) -> httpx.Response:
            self.requests.append(request)
            return answer(request)

        http = httpx.AsyncClient(transport=httpx.MockTransport(record))
        self.loop = asyncio.new_event_loop()
        self.server = GitHelperServer(AgentAPI("https://slipway.test", "agent-token", http=http), socket_path)
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def __enter__(self) -> Helper:
        self.thread.start()
        try:
            self.run(self.server.start())
        except BaseException:
            self.__exit__()
            raise
        self.secret_before = os.environ.get(git.SECRET_VARIABLE)
        os.environ[git.SECRET_VARIABLE] = self.server.secret
        return self

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(10)

    def __exit__(self, *exc: object) -> None:
        if getattr(self, "secret_before", None) is not None:
            os.environ[git.SECRET_VARIABLE] = str(self.secret_before)
        else:
            os.environ.pop(git.SECRET_VARIABLE, None)
        self.run(self.server.close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@pytest.fixture
def socket_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    path = git.socket_path_for(tmp_path)
    monkeypatch.setenv(git.SOCKET_VARIABLE, str(path))
    monkeypatch.delenv(git.SECRET_VARIABLE, raising=False)
    yield path


def test_askpass_answers_git_s_prompts_with_the_owner_s_token(
    socket_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with Helper(socket_path, lambda request: httpx.Response(200, json=LINKED)) as helper:
        assert stat.S_IMODE(os.stat(socket_path).st_mode) == 0o600
        assert git.main(["askpass", "Username for 'https://github.com': "]) == 0
        assert git.main(["askpass", "Password for 'https://x-access-token@github.com': "]) == 0
        assert git.main(["external-auth", "access-token", "gh", "--extra", "token_type"]) == 0
    assert capsys.readouterr().out.splitlines() == ["x-access-token", "tok", "bearer"]
    asked = [request.url.params for request in helper.requests]
    # The password prompt's user is not part of the URL the provider is matched on.
    assert [params.get("match") for params in asked[:2]] == ["https://github.com", "https://github.com"]
    assert asked[2].get("id") == "gh"
    assert all(request.headers["Slipway-Agent-Token"] == "agent-token" for request in helper.requests)


def test_an_unlinked_provider_prints_where_to_link_and_waits(
    socket_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        listening = request.url.params.get("listen") == "true"
        return httpx.Response(200, json=LINKED if listening else NOT_LINKED)

    with Helper(socket_path, answer):
        assert git.main(["askpass", "Password for 'https://github.com': "]) == 0
        output = capsys.readouterr()
        assert output.out == "tok\n"
        assert "https://slipway.test/external-auth/gh" in output.err and "Linked GitHub." in output.err
        # For scripts there is no waiting: exit 1 with the link.
        with_no_link = Helper(socket_path, lambda request: httpx.Response(200, json=NOT_LINKED))
    with with_no_link:
        assert git.main(["external-auth", "access-token", "gh"]) == 1
        assert "Link your GitHub account first: https://slipway.test/external-auth/gh" in capsys.readouterr().err


def test_refusals_and_a_missing_agent_are_one_line_and_non_zero(
    socket_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    message = {"message": "No Git provider on this server serves https://nowhere.test."}
    with Helper(socket_path, lambda request: httpx.Response(404, json=message)):
        assert git.main(["askpass", "Username for 'https://nowhere.test': "]) == 1
    assert capsys.readouterr().err == "slipway: No Git provider on this server serves https://nowhere.test.\n"
    assert git.main(["askpass", "Username for 'https://nowhere.test': "]) == 1  # the agent is gone
    assert "cannot reach the workspace agent" in capsys.readouterr().err
    assert git.main(["askpass", "Enter passphrase for key: "]) == 1
    assert "not a prompt git asks for credentials with" in capsys.readouterr().err
    monkeypatch.delenv(git.SOCKET_VARIABLE)
    assert git.main(["askpass", "Username for 'https://github.com': "]) == 1
    assert "run this inside a Slipway workspace" in capsys.readouterr().err
    assert git.main([]) == 2


def test_the_wrappers_run_the_helper_with_the_agent_s_interpreter(socket_path: Path, tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    git.write_wrappers(bin_dir)
    askpass = bin_dir / git.ASKPASS_NAME
    assert os.access(askpass, os.X_OK) and os.access(bin_dir / git.GITSSH_NAME, os.X_OK)
    with Helper(socket_path) as helper:
        env = {
            "PATH": "/usr/bin:/bin",
            git.SOCKET_VARIABLE: str(socket_path),
            git.SECRET_VARIABLE: helper.server.secret,
        }
        prompt = [str(askpass), "Password for 'https://github.com': "]
        result = subprocess.run(prompt, env=env, capture_output=True, text=True)
        # The same wrapper, run by a process that has the path but not this agent's secret (another workspace's).
        without = subprocess.run(prompt, env={**env, git.SECRET_VARIABLE: ""}, capture_output=True, text=True)
    assert (result.returncode, result.stdout) == (0, "tok\n"), result.stderr
    assert (without.returncode, without.stdout) == (1, "") and git_helper.REFUSED in without.stderr


def test_a_request_without_the_agent_s_secret_is_refused_and_never_reaches_the_server(socket_path: Path) -> None:
    with Helper(socket_path) as helper:
        for secret in ("", "guess", helper.server.secret[:-1], helper.server.secret + "x", "\ud800"):
            for op in ({"op": "external-auth", "id": "gh"}, {"op": "gitsshkey"}):
                with pytest.raises(git.HelperError, match="serves only the processes of its own workspace"):
                    git.ask(op, secret=secret)
        # A request that names no secret at all, or not as a string, as a hand-written client would send.
        for raw in (
            b'{"op": "gitsshkey"}\n',
            b'{"op": "gitsshkey", "secret": 1}\n',
            b'{"op": "gitsshkey", "secret": null}\n',
        ):
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
                connection.connect(str(socket_path))
                connection.sendall(raw)
                assert json.loads(connection.makefile().readline())["status"] == 403
        assert helper.requests == []
        assert git.ask({"op": "external-auth", "id": "gh"})["access_token"] == "tok"  # its own secret
        assert len(helper.requests) == 1


def test_a_second_agent_refuses_to_take_over_a_live_socket_and_takes_over_a_stale_one(socket_path: Path) -> None:
    with Helper(socket_path) as first:
        with pytest.raises(git_helper.SocketTaken, match="another agent holds"):
            Helper(socket_path).__enter__()
        # The first still answers on its socket.
        assert git.ask({"op": "external-auth", "id": "gh"}, secret=first.server.secret)["access_token"] == "tok"
    # An agent of an older version held no lock: a socket that still answers is refused all the same.
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as older:
        older.bind(str(socket_path))
        older.listen()
        with pytest.raises(git_helper.SocketTaken, match="another agent serves"):
            Helper(socket_path).__enter__()
    # What a killed agent left (a socket file nobody listens on): taken over.
    assert socket_path.exists()
    with Helper(socket_path):
        assert git.ask({"op": "external-auth", "id": "gh"})["access_token"] == "tok"
    assert not socket_path.exists()


def test_sessions_and_scripts_point_git_at_the_helpers_unless_the_template_chose_its_own(tmp_path: Path) -> None:
    access = git.HelperAccess(tmp_path / "git.sock", "the-secret")
    inherited = {"PATH": "/bin", git.SOCKET_VARIABLE: "/elsewhere/git.sock", git.SECRET_VARIABLE: "outer"}
    environ = build_environment(Manifest(), tmp_path, agent_environ=inherited, git_helper=access)
    bin_dir = tmp_path / "coder-script-data" / "bin"
    assert environ["GIT_ASKPASS"] == str(bin_dir / "slipway-gitaskpass")
    assert environ["GIT_SSH_COMMAND"] == str(bin_dir / "slipway-gitssh")
    assert (environ[git.SOCKET_VARIABLE], environ[git.SECRET_VARIABLE]) == (str(tmp_path / "git.sock"), "the-secret")
    own = build_environment(
        Manifest(environment_variables={"GIT_ASKPASS": "/opt/mine"}), tmp_path, agent_environ={}, git_helper=access
    )
    assert own["GIT_ASKPASS"] == "/opt/mine"
    # No helper (it could not start): nothing points at one, not even the helper of whatever started the agent.
    bare = build_environment(Manifest(), tmp_path, agent_environ=inherited)
    assert not {git.SOCKET_VARIABLE, git.SECRET_VARIABLE, "GIT_ASKPASS", "GIT_SSH_COMMAND"} & set(bare)


def test_a_log_dir_too_deep_for_a_unix_socket_gets_one_in_the_temp_dir(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 120)
    path = git.socket_path_for(deep)
    assert len(os.fsencode(path)) < 100 and path == git.socket_path_for(deep)
    assert path.parent != Path(tempfile.gettempdir()) and path.parent.name.startswith("slipway-git-")
