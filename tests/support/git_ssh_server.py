"""A Git server over SSH for tests (asyncssh, the library the agent's own SSH server uses): it lets in one
public key and runs git-upload-pack / git-receive-pack on repositories under a root."""

from __future__ import annotations

import asyncio
import shlex
import threading
from pathlib import Path
from types import TracebackType

import asyncssh

from tests.support.net import free_port

GIT_COMMANDS = ("git-upload-pack", "git-receive-pack")


class GitSSHServer:
    def __init__(self, root: Path, authorized_key: str) -> None:
        self.root = root
        self.authorized_key = authorized_key
        self.port = free_port()
        self.commands: list[str] = []
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncssh.SSHAcceptor | None = None

    def url(self, repository: str) -> str:
        return f"ssh://git@127.0.0.1:{self.port}/{repository}"

    async def _handle(self, process: asyncssh.SSHServerProcess[bytes]) -> None:
        command = process.command or ""
        self.commands.append(command)
        words = shlex.split(command)
        if len(words) != 2 or words[0] not in GIT_COMMANDS:
            process.stderr.write(b"only git fetch and push here\n")
            process.exit(1)
            return
        repository = (self.root / words[1].lstrip("/")).resolve()
        if not repository.is_relative_to(self.root.resolve()):
            process.exit(1)
            return
        git = await asyncio.create_subprocess_exec(
            words[0], str(repository), stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE
        )
        assert git.stdin is not None and git.stdout is not None
        git_in, git_out = git.stdin, git.stdout

        async def forward_input() -> None:
            while data := await process.stdin.read(65536):
                git_in.write(data)
                await git_in.drain()
            git_in.close()

        forwarding = asyncio.create_task(forward_input())
        while data := await git_out.read(65536):
            process.stdout.write(data)
            await process.stdout.drain()
        code = await git.wait()
        forwarding.cancel()
        await asyncio.gather(forwarding, return_exceptions=True)
        process.exit(code)

    async def _start(self) -> None:
        self._server = await asyncssh.create_server(
            None,
            "127.0.0.1",
            self.port,
            server_host_keys=[asyncssh.generate_private_key("ssh-ed25519")],
            authorized_client_keys=asyncssh.import_authorized_keys(self.authorized_key),
            process_factory=self._handle,
            encoding=None,
        )

    def start(self) -> GitSSHServer:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(timeout=30)
        return self

    async def _close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        others = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        for task in others:
            task.cancel()
        await asyncio.gather(*others, return_exceptions=True)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._close(), self._loop).result(timeout=30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    def __enter__(self) -> GitSSHServer:
        return self.start()

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.stop()
