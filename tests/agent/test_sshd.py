"""The agent's SSH server, with a real asyncssh client over a socket pair and with OpenSSH's own ssh and scp."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import asyncssh
import pytest

from agent.processes import PASSED_ON_IF_IGNORED, stop_passing_on_ignored_signals
from agent.sshd import SSHService
from tests.agent.support import (
    OPENSSH_OPTIONS,
    pid_alive,
    run,
    run_tool,
    session_context,
    ssh_on_loopback,
    ssh_over_socketpair,
)


@pytest.fixture
def service(tmp_path: Path) -> SSHService:
    workdir, home = tmp_path / "project", tmp_path / "home"
    workdir.mkdir()
    home.mkdir()
    context = session_context(workdir, home, FROM_MANIFEST="manifest-value")
    return SSHService(lambda: context)


def test_exec_reports_output_and_exit_status(service: SSHService, tmp_path: Path) -> None:
    async def scenario() -> asyncssh.SSHCompletedProcess:
        async with ssh_over_socketpair(service) as connection:
            return await connection.run("echo out; echo err >&2; pwd; echo $FROM_MANIFEST; exit 7", encoding="utf-8")

    result = run(scenario())
    assert result.exit_status == 7
    assert result.stdout == f"out\n{tmp_path / 'project'}\nmanifest-value\n"
    assert result.stderr == "err\n"


def test_exec_passes_stdin_through_to_eof(service: SSHService) -> None:
    payload = bytes(range(256)) * 4096  # 1 MiB of every byte value: binary-clean, with flow control

    async def scenario() -> asyncssh.SSHCompletedProcess:
        async with ssh_over_socketpair(service) as connection:
            return await connection.run("cat; echo done >&2", input=payload, encoding=None)

    result = run(scenario())
    assert result.exit_status == 0
    assert result.stdout == payload
    assert result.stderr == b"done\n"


def test_exec_killed_by_a_signal_reports_the_signal(service: SSHService) -> None:
    async def scenario() -> asyncssh.SSHCompletedProcess:
        async with ssh_over_socketpair(service) as connection:
            return await connection.run("kill -TERM $$")

    result = run(scenario())
    assert result.exit_signal is not None
    assert result.exit_signal[0] == "TERM"


@pytest.fixture
def agent_started_in_the_background_under_nohup() -> Iterator[None]:
    """This process's signals as the local example leaves the agent's: SIGQUIT and SIGHUP ignored."""
    saved = {signum: signal.getsignal(signum) for signum in PASSED_ON_IF_IGNORED}
    for signum in saved:
        signal.signal(signum, signal.SIG_IGN)
    yield
    for signum, handler in saved.items():
        signal.signal(signum, handler)


@pytest.mark.usefixtures("agent_started_in_the_background_under_nohup")
def test_sessions_do_not_inherit_the_signals_the_agent_ignores(service: SSHService) -> None:
    async def status_after(signal_name: str, on_a_pty: bool) -> str:
        """What a program that signals itself ends with, run in a session (its own sh: login shells such as bash
        catch SIGQUIT for themselves, and would hide what their children get)."""
        async with ssh_over_socketpair(service) as connection:
            command = f"sh -c 'kill -{signal_name} $$; echo survived'; echo status=$?"
            result = await connection.run(command, encoding="utf-8", term_type="xterm" if on_a_pty else None)
            lines = [line.strip() for line in str(result.stdout).splitlines()]  # on a PTY also bash's "Quit" notice
            return " ".join(line for line in lines if line == "survived" or line.startswith("status="))

    assert run(status_after("QUIT", on_a_pty=False)) == "survived status=0"  # what users got before

    stop_passing_on_ignored_signals()
    for on_a_pty in (False, True):
        assert run(status_after("QUIT", on_a_pty)) == "status=131"  # Ctrl-\ quits a program again
        assert run(status_after("HUP", on_a_pty)) == "status=129"  # a dropped connection's hangup ends it
    os.kill(os.getpid(), signal.SIGQUIT)  # the agent itself goes on ignoring them
    os.kill(os.getpid(), signal.SIGHUP)


def test_environment_requests_reach_the_session(service: SSHService) -> None:
    async def scenario() -> asyncssh.SSHCompletedProcess:
        async with ssh_over_socketpair(service) as connection:
            return await connection.run("echo $GREETING", env={"GREETING": "hello"}, encoding="utf-8")

    assert run(scenario()).stdout == "hello\n"


def test_pty_session_gets_term_and_follows_window_changes(service: SSHService) -> None:
    async def scenario() -> tuple[str, int | None]:
        async with ssh_over_socketpair(service) as connection:
            process = await connection.create_process(
                'stty size; echo TERM=$TERM; test "$SSH_TTY" = "$(tty)" && echo same-tty; read line; stty size; exit 3',
                term_type="xterm-test",
                term_size=(100, 30),
                encoding="utf-8",
            )
            output = ""
            while "TERM=" not in output:
                output += await process.stdout.read(1024)
            process.change_terminal_size(120, 40)
            await asyncio.sleep(0.2)
            process.stdin.write("go\n")
            result = await process.wait()
            return output + str(result.stdout), result.exit_status

    output, status = run(scenario())
    assert status == 3
    assert "30 100" in output
    assert "TERM=xterm-test" in output
    assert "same-tty" in output
    assert "40 120" in output


def test_interactive_login_shell_on_a_pty(service: SSHService) -> None:
    async def scenario() -> tuple[str, int | None]:
        async with ssh_over_socketpair(service) as connection:
            process = await connection.create_process(term_type="xterm", term_size=(80, 24), encoding="utf-8")
            process.stdin.write("echo shell=$0; exit 5\n")
            result = await process.wait()
            return str(result.stdout), result.exit_status

    output, status = run(scenario())
    assert status == 5
    assert "shell=-" in output  # started as a login shell, as sshd does


def test_closing_the_connection_hangs_up_a_running_command(service: SSHService, tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"

    async def scenario() -> int:
        async with ssh_over_socketpair(service) as connection:
            await connection.create_process(f"echo $$ > {pid_file}; exec sleep 300")
            while not pid_file.exists() or not pid_file.read_text().strip():
                await asyncio.sleep(0.05)
        pid = int(pid_file.read_text())
        for _ in range(100):
            if not pid_alive(pid):
                break
            await asyncio.sleep(0.05)
        return pid

    assert not pid_alive(run(scenario()))


def test_sftp_works_relative_to_the_home_directory(service: SSHService, tmp_path: Path) -> None:
    source = tmp_path / "source.bin"
    source.write_bytes(b"payload" * 1000)

    async def scenario() -> bytes:
        async with ssh_over_socketpair(service) as connection, connection.start_sftp_client() as sftp:
            await sftp.put(str(source), "uploaded.bin")
            async with sftp.open("uploaded.bin", "rb") as remote:
                content = await remote.read()
                assert isinstance(content, bytes)
                return content

    assert run(scenario()) == source.read_bytes()
    assert (tmp_path / "home" / "uploaded.bin").read_bytes() == source.read_bytes()


def test_scp_protocol_is_served(service: SSHService, tmp_path: Path) -> None:
    source = tmp_path / "notes.txt"
    source.write_text("scp me\n")

    async def scenario() -> None:
        async with ssh_over_socketpair(service) as connection:
            await asyncssh.scp(str(source), (connection, "copied.txt"))

    run(scenario())
    assert (tmp_path / "home" / "copied.txt").read_text() == "scp me\n"


def test_local_port_forwarding_reaches_a_workspace_port(service: SSHService) -> None:
    async def scenario() -> bytes:
        async def shout(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writer.write((await reader.read(100)).upper())
            await writer.drain()
            writer.close()

        server = await asyncio.start_server(shout, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            async with ssh_over_socketpair(service) as connection:
                reader, writer = await connection.open_connection("127.0.0.1", port)
                writer.write(b"hello")
                reply = await reader.read()
                writer.close()
                return bytes(reply)
        finally:
            server.close()
            await server.wait_closed()

    assert run(scenario()) == b"HELLO"


# The real OpenSSH client ------------------------------------------------------------------------------------------


def test_openssh_exec_exit_status_and_output(service: SSHService) -> None:
    async def scenario() -> tuple[int, bytes, bytes]:
        async with ssh_on_loopback(service) as port:
            return await run_tool("ssh", *OPENSSH_OPTIONS, "-p", str(port), "alice@127.0.0.1", "echo hi; exit 7")

    status, stdout, stderr = run(scenario())
    assert (status, stdout) == (7, b"hi\n"), stderr


def test_openssh_with_a_forced_tty(service: SSHService) -> None:
    async def scenario() -> tuple[int, bytes, bytes]:
        async with ssh_on_loopback(service) as port:
            return await run_tool("ssh", *OPENSSH_OPTIONS, "-tt", "-p", str(port), "127.0.0.1", "tty; exit 4")

    status, stdout, stderr = run(scenario())
    assert status == 4, stderr
    assert b"/dev/pts/" in stdout


def test_openssh_exec_with_stdin(service: SSHService) -> None:
    async def scenario() -> tuple[int, bytes, bytes]:
        async with ssh_on_loopback(service) as port:
            return await run_tool(
                "ssh", *OPENSSH_OPTIONS, "-p", str(port), "bob@127.0.0.1", "tr a-z A-Z", stdin=b"shout this\n"
            )

    status, stdout, stderr = run(scenario())
    assert (status, stdout) == (0, b"SHOUT THIS\n"), stderr


def test_openssh_client_sees_a_killed_command_end(service: SSHService) -> None:
    async def scenario() -> tuple[int, bytes, bytes]:
        async with ssh_on_loopback(service) as port:
            return await run_tool("ssh", *OPENSSH_OPTIONS, "-p", str(port), "127.0.0.1", "kill -KILL $$")

    status, _, _ = run(scenario())
    assert status == 255  # what OpenSSH's client makes of an exit-signal, from its own sshd as from ours


def test_openssh_scp_both_ways_and_legacy_protocol(service: SSHService, tmp_path: Path) -> None:
    source = tmp_path / "data.bin"
    source.write_bytes(bytes(range(256)) * 1000)
    back, legacy_back = tmp_path / "back.bin", tmp_path / "legacy.bin"

    async def scenario() -> list[tuple[int, bytes, bytes]]:
        async with ssh_on_loopback(service) as port:
            common = ["scp", *OPENSSH_OPTIONS, "-P", str(port)]
            return [
                await run_tool(*common, str(source), "alice@127.0.0.1:sent.bin"),
                await run_tool(*common, "alice@127.0.0.1:sent.bin", str(back)),
                await run_tool(*common, "-O", str(source), "alice@127.0.0.1:legacy.bin"),
                await run_tool(*common, "-O", "alice@127.0.0.1:legacy.bin", str(legacy_back)),
            ]

    for status, _, stderr in run(scenario()):
        assert status == 0, stderr
    assert (tmp_path / "home" / "sent.bin").read_bytes() == source.read_bytes()
    assert back.read_bytes() == source.read_bytes()
    assert (tmp_path / "home" / "legacy.bin").read_bytes() == source.read_bytes()
    assert legacy_back.read_bytes() == source.read_bytes()


def test_rsync_runs_its_server_through_exec(service: SSHService, tmp_path: Path) -> None:
    source = tmp_path / "tree"
    (source / "nested").mkdir(parents=True)
    (source / "a.txt").write_text("a\n")
    (source / "nested" / "b.bin").write_bytes(bytes(range(256)) * 100)

    async def scenario() -> tuple[int, bytes, bytes]:
        async with ssh_on_loopback(service) as port:
            shell = " ".join(["ssh", *OPENSSH_OPTIONS, "-p", str(port)])
            return await run_tool("rsync", "-a", "-e", shell, f"{source}/", "alice@127.0.0.1:synced/")

    status, _, stderr = run(scenario())
    assert status == 0, stderr
    synced = tmp_path / "project" / "synced"  # exec sessions start in the expanded directory
    assert (synced / "a.txt").read_text() == "a\n"
    assert (synced / "nested" / "b.bin").read_bytes() == bytes(range(256)) * 100
