"""Real `slipway provisionerd start` processes against a real server, and the API calls tests drive them with."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx

from tests.support.archives import tar_of
from tests.support.server import SLIPWAY

DAEMON_PSK = "external-daemon-psk"
TRIVIAL_TEMPLATE = {"main.tf": 'resource "terraform_data" "home" {}\n'}


class DaemonProcess:
    """One external daemon; credentials come from ``env`` (SLIPWAY_PROVISIONER_DAEMON_PSK, …) or ``args``.
    ``wrapper``: the command it runs under, e.g. ``ip netns exec NAME`` for a daemon on a host of its own."""

    def __init__(
        self,
        url: str,
        name: str,
        work_dir: Path,
        *args: str,
        env: dict[str, str] | None = None,
        wrapper: Sequence[str] = (),
    ) -> None:
        self.name = name
        self.log_path = work_dir / f"daemon-{name}.log"
        self.args = [*wrapper, SLIPWAY, "provisionerd", "start", "--url", url, "--name", name, *args]
        self.env = {key: value for key, value in os.environ.items() if not key.startswith("SLIPWAY_")}
        self.env.update({"XDG_CONFIG_HOME": str(work_dir / "config"), "HOME": os.environ.get("HOME", str(work_dir))})
        self.env.setdefault("SLIPWAY_PROVISIONER_CACHE_DIR", str(work_dir / "provisioner-cache"))
        self.env.update(env or {})
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> DaemonProcess:
        with self.log_path.open("ab") as log:
            # Its own session, so a test can signal (or kill -9) the daemon and its Terraform together.
            self.process = subprocess.Popen(
                self.args, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        return self

    def wait_registered(self, api: httpx.Client, timeout: float = 30.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise AssertionError(f"daemon {self.name} exited {self.process.returncode}:\n{self.log()}")
            for daemon in api.get("/provisionerdaemons").json():
                if daemon["name"] == self.name and daemon["status"] != "offline":
                    time.sleep(0.3)  # registration comes just before the RQ worker starts listening
                    return dict(daemon)
            time.sleep(0.1)
        raise AssertionError(f"daemon {self.name} did not register:\n{self.log()}")

    def wait_exit(self, timeout: float = 30.0) -> int:
        assert self.process is not None
        return self.process.wait(timeout=timeout)

    def signal(self, signum: int) -> None:
        assert self.process is not None
        self.process.send_signal(signum)

    def kill_all(self) -> None:
        """kill -9 the daemon and everything it started (Terraform, providers)."""
        assert self.process is not None
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait(timeout=10)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill_all()

    def __enter__(self) -> DaemonProcess:
        return self.start()

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.stop()


def push_import(
    api: httpx.Client, tags: dict[str, str] | None = None, files: dict[str, str] | None = None, organization: str = ""
) -> Any:
    """Upload a template and queue its import (in ``organization``, by Coder's path, when given); the reply is the
    version, with its job."""
    upload = api.post(
        "/files", content=tar_of(files or TRIVIAL_TEMPLATE), headers={"Content-Type": "application/x-tar"}
    )
    assert upload.status_code == 201, upload.text
    path = f"/organizations/{organization}/templateversions" if organization else "/templateversions"
    version = api.post(path, json={"file_id": upload.json()["id"], "provisioner_tags": tags or {}})
    assert version.status_code == 201, version.text
    return version.json()


def job(api: httpx.Client, job_id: str) -> dict[str, Any]:
    reply = api.get(f"/provisionerjobs/{job_id}")
    assert reply.status_code == 200, reply.text
    return dict(reply.json())


def wait_job(api: httpx.Client, job_id: str, statuses: tuple[str, ...], timeout: float = 60.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        current = job(api, job_id)
        if current["status"] in statuses or time.monotonic() > deadline:
            return current
        time.sleep(0.1)


def user_token(url: str, admin: httpx.Client, username: str, roles: list[str], password: str) -> str:
    email = f"{username}@example.com"
    created = admin.post("/users", json={"username": username, "email": email, "password": password, "roles": roles})
    assert created.status_code == 201, created.text
    login = httpx.post(f"{url}/api/v2/users/login", json={"email": email, "password": password})
    return str(login.json()["session_token"])
