"""Ways in across web replicas: the agent holds its connection to replica A, the user reaches replica B (same
database, Redis and secret key, as behind a load balancer). Every tunnel then crosses Redis."""

from __future__ import annotations

from pathlib import Path

import httpx
from websockets.sync.client import connect

from tests.conftest import run_cli
from tests.support.deployment import ECHO_SERVER, running_deployment
from tests.support.net import free_port
from tests.support.server import ServerProcess

SECRET = "replicas-share-this-secret"


def test_ssh_and_apps_work_when_user_and_agent_reach_different_replicas(tmp_path: Path) -> None:
    with running_deployment(tmp_path, env={"SLIPWAY_SECRET_KEY": SECRET}) as deployment:
        port = free_port()
        deployment.push_local()
        deployment.create("alice", "spread", f"dev_port={port}")
        deployment.wait_ready("alice", "spread")
        deployment.start_server("alice", "spread", ECHO_SERVER, port)
        data = deployment.server.data_dir
        shared = {
            "SLIPWAY_SECRET_KEY": SECRET,
            "SLIPWAY_DATABASE_URL": f"sqlite:///{data / 'slipway.db'}",
            "SLIPWAY_REDIS_URL": deployment.server.redis_url,
            "SLIPWAY_AGENT_HEARTBEAT_INTERVAL": "1s",
        }
        with ServerProcess(tmp_path / "b", "--provisioner-daemons", "0", env=shared) as replica_b:
            env = {**deployment.cli_env("alice"), "SLIPWAY_URL": replica_b.url}
            result = run_cli("ssh", "spread", "echo via B; exit 4", env=env)
            assert result.returncode == 4 and result.stdout.strip() == "via B", result.stderr

            app = f"{replica_b.url}/@alice/spread.main/apps/dev/"
            page = httpx.get(f"{app}from-b", headers=deployment.people["alice"].auth, timeout=30)
            assert page.status_code == 200 and page.text.startswith("dev server ok path=/from-b")
            socket_url = app.replace("http://", "ws://") + "echo"
            with connect(socket_url, additional_headers=deployment.people["alice"].auth) as websocket:
                websocket.send("across replicas")
                assert websocket.recv(timeout=10) == "across replicas"
