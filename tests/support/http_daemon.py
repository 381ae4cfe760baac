"""A stand-in provisioner daemon speaking the protocol to a real server over HTTP, and API helpers for tests."""

from __future__ import annotations

from typing import Any

import httpx

from tests.support.archives import tar_of


class HttpDaemon:
    def __init__(self, url: str, psk: str, name: str = "stand-in", tags: dict[str, str] | None = None) -> None:
        self.http = httpx.Client(base_url=f"{url}/api/v2/provisionerd", headers={"Slipway-Provisioner-PSK": psk})
        reply = self.http.post("/register", json={"name": name, "tags": tags or {}})
        reply.raise_for_status()
        self.http.headers["Slipway-Provisioner-Daemon"] = reply.json()["daemon_id"]

    def call(self, path: str, body: dict[str, Any] | None = None) -> httpx.Response:
        return self.http.post(path, json=body or {})

    def log(self, job_id: str, *outputs: str, stage: str = "Planning infrastructure") -> None:
        reply = self.call(f"/jobs/{job_id}/logs", {"logs": [{"stage": stage, "output": o} for o in outputs]})
        reply.raise_for_status()

    def close(self) -> None:
        self.http.close()


def api_client(url: str, token: str) -> httpx.Client:
    return httpx.Client(base_url=f"{url}/api/v2", headers={"Authorization": f"Bearer {token}"}, timeout=30)


def sign_up_owner(url: str, password: str) -> str:
    httpx.post(
        f"{url}/api/v2/users/first", json={"username": "alice", "email": "alice@example.com", "password": password}
    )
    reply = httpx.post(f"{url}/api/v2/users/login", json={"email": "alice@example.com", "password": password})
    return str(reply.json()["session_token"])


def new_version(api: httpx.Client) -> dict[str, Any]:
    archive = tar_of({"main.tf": 'resource "terraform_data" "x" {}\n'})
    upload = api.post("/files", content=archive, headers={"Content-Type": "application/x-tar"}).json()
    version: dict[str, Any] = api.post("/templateversions", json={"file_id": upload["id"]}).json()
    return version
