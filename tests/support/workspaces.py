"""Workspaces with agents in a real server, built by a stand-in provisioner daemon (no Terraform, no agent process):
for CLI tests that need a workspace list or an agent's status, not a way into the workspace."""

from __future__ import annotations

from typing import Any

import httpx

from tests.support.http_daemon import HttpDaemon, new_version


class WorkspaceBuilder:
    def __init__(self, api: httpx.Client, daemon: HttpDaemon, template_name: str = "ways-in") -> None:
        self.api = api
        self.daemon = daemon
        version = new_version(api)
        self._finish(version["job"]["id"], {"template_import": {}})
        template = api.post("/templates", json={"name": template_name, "version_id": version["id"]})
        assert template.status_code == 201, template.text
        self.template_id = template.json()["id"]

    def create(self, name: str, agents: list[str], *, connection_timeout: int = 1) -> dict[str, Any]:
        """A running workspace whose agents never connect: "connecting", then "timeout" after the given seconds."""
        created = self.api.post("/workspaces", json={"template_id": self.template_id, "name": name})
        assert created.status_code == 201, created.text
        workspace: dict[str, Any] = created.json()
        resources = [
            {
                "name": f"box-{agent}",
                "type": "docker_container",
                "agents": [
                    {
                        "name": agent,
                        "os": "linux",
                        "arch": "amd64",
                        "token": f"token-{name}-{agent}",
                        "connection_timeout": connection_timeout,
                    }
                ],
            }
            for agent in agents
        ]
        self._finish(workspace["latest_build"]["job"]["id"], {"workspace_build": {"resources": resources}})
        return workspace

    def stop(self, workspace: dict[str, Any]) -> None:
        build = self.api.post(f"/workspaces/{workspace['id']}/builds", json={"transition": "stop"})
        assert build.status_code == 201, build.text
        self._finish(build.json()["job"]["id"], {"workspace_build": {}})

    def _finish(self, job_id: str, completion: dict[str, Any]) -> None:
        assert self.daemon.call(f"/jobs/{job_id}/acquire").status_code == 200
        completed = self.daemon.call(f"/jobs/{job_id}/complete", completion)
        assert completed.status_code == 204, completed.text
