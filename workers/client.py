"""The daemon's HTTP client for ``/api/v2/provisionerd/``: the only way a daemon reaches the server."""

from __future__ import annotations

import logging
import time
from typing import Any

import httpx

log = logging.getLogger(__name__)

PSK_HEADER = "Slipway-Provisioner-PSK"
KEY_HEADER = "Slipway-Provisioner-Key"
DAEMON_HEADER = "Slipway-Provisioner-Daemon"


def psk_credential(psk: str) -> dict[str, str]:
    return {PSK_HEADER: psk}


def key_credential(key: str) -> dict[str, str]:
    return {KEY_HEADER: key}


def token_credential(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


class ServerRefused(Exception):
    """The server answered with an error that retrying will not fix (e.g. 401, 403, 409)."""

    def __init__(self, status: int, message: str):
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message

    @property
    def fatal(self) -> bool:
        """The credential is bad or gone: the daemon must stop, not retry. (A 403 about one job is not fatal.)"""
        return self.status == 401


class ProvisionerClient:
    def __init__(self, url: str, *, credential: dict[str, str], timeout: float = 30.0, retry_for: float = 60.0):
        self.url = url.rstrip("/")
        self.daemon_id = ""
        self.retry_for = retry_for
        self._http = httpx.Client(base_url=f"{self.url}/api/v2/provisionerd", headers=credential, timeout=timeout)

    def close(self) -> None:
        self._http.close()

    def call(self, path: str, body: dict[str, Any]) -> Any:
        """POST with retries while the server is unreachable or restarting (5xx); other errors raise."""
        deadline = time.monotonic() + self.retry_for
        delay = 0.05
        headers = {DAEMON_HEADER: self.daemon_id} if self.daemon_id else {}
        while True:
            try:
                response = self._http.post(path, json=body, headers=headers)
                if response.status_code < 500:
                    break
                problem = f"server error {response.status_code}"
            except httpx.TransportError as exc:
                problem = str(exc) or exc.__class__.__name__
            if time.monotonic() + delay > deadline:
                raise ConnectionError(f"cannot reach {self.url}: {problem}")
            log.warning("provisionerd call %s failed (%s); retrying in %.1f s", path, problem, delay)
            time.sleep(delay)
            delay = min(delay * 2, 5.0)
        if response.status_code >= 400:
            try:
                message = response.json().get("message", response.text)
            except ValueError:
                message = response.text
            raise ServerRefused(response.status_code, message)
        return response.json() if response.content else None

    def register(self, name: str, tags: dict[str, str], version: str) -> dict[str, Any]:
        reply: dict[str, Any] = self.call("/register", {"name": name, "tags": tags, "version": version})
        self.daemon_id = reply["daemon_id"]
        return reply

    def heartbeat(self) -> None:
        self.call("/heartbeat", {})

    def acquire(self, job_id: str) -> dict[str, Any]:
        reply: dict[str, Any] = self.call(f"/jobs/{job_id}/acquire", {})
        return reply

    def post_logs(self, job_id: str, lines: list[dict[str, Any]]) -> bool:
        """Send a batch (also the heartbeat); True when the job was canceled."""
        return bool(self.call(f"/jobs/{job_id}/logs", {"logs": lines})["canceled"])

    def complete(self, job_id: str, body: dict[str, Any]) -> None:
        self.call(f"/jobs/{job_id}/complete", body)

    def fail(self, job_id: str, body: dict[str, Any]) -> None:
        self.call(f"/jobs/{job_id}/fail", body)
