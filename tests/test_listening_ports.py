"""Listening ports: what the agent reads from /proc, what it reports, the API (Coder's shape), the workspace page's
list with a link to open each, and who may open a port (port sharing in test_port_sharing.py)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from flask import Flask

from agent.ports import listening_ports
from app.agents import services
from app.core.config import Settings
from tests.conftest import PASSWORD, Persona, make_settings
from tests.support.dev_urls import AGENT_HEADERS, create_workspace
from tests.support.web import sign_in

pytestmark = pytest.mark.databases("sqlite")

TCP_HEADER = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"


@pytest.fixture
def settings(tmp_path: Path, database_url: str, redis_server: str) -> Settings:
    return make_settings(tmp_path, database_url, redis_server, provisioner_daemon_psk="test-daemon-psk")


@pytest.fixture
def workspace(app: Flask, personas: dict[str, Persona]) -> dict[str, Any]:
    return create_workspace(app, personas)


def agent_of(app: Flask, workspace: dict[str, Any], person: Persona) -> dict[str, Any]:
    found = app.test_client().get(f"/api/v2/workspaces/{workspace['id']}", headers=person.auth).json
    return dict(found["latest_build"]["resources"][0]["agents"][0])


@pytest.fixture
def listener() -> Iterator[int]:
    with socket.create_server(("127.0.0.1", 0)) as server:
        yield server.getsockname()[1]


def test_the_agent_finds_a_listening_socket_and_its_process(listener: int) -> None:
    found = {port.port: port for port in listening_ports()}
    assert listener in found
    assert found[listener].process_name == Path("/proc/self/comm").read_text().strip()


def test_the_agent_reads_listen_entries_of_both_tables_once(tmp_path: Path) -> None:
    (tmp_path / "net").mkdir()
    # 8000 on IPv4 and IPv6 (listed once), 8001 connected (not listening), 5 (below Coder's minimum).
    (tmp_path / "net" / "tcp").write_text(
        TCP_HEADER
        + "   0: 00000000:1F40 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 111 1\n"
        + "   1: 0100007F:1F41 0100007F:9999 01 00000000:00000000 00:00000000 00000000  1000        0 112 1\n"
        + "   2: 00000000:0005 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 113 1\n"
    )
    (tmp_path / "net" / "tcp6").write_text(
        TCP_HEADER + "   0: 00000000000000000000000000000000:1F40 00000000000000000000000000000000:0000 0A "
        "00000000:00000000 00:00000000 00000000  1000        0 114 1\n"
    )
    assert [(port.port, port.process_name) for port in listening_ports(tmp_path)] == [(8000, "")]


def test_reported_ports_are_listed_in_coders_shape(
    app: Flask, workspace: dict[str, Any], personas: dict[str, Persona]
) -> None:
    api = app.test_client()
    body = {"ports": [{"process_name": "python3", "network": "tcp", "port": 8000}, {"port": 5432}]}
    assert api.post("/api/v2/workspaceagents/me/listening-ports", json=body, headers=AGENT_HEADERS).status_code == 204
    agent_id = agent_of(app, workspace, personas["carol"])["id"]
    listed = api.get(f"/api/v2/workspaceagents/{agent_id}/listening-ports", headers=personas["carol"].auth)
    assert listed.status_code == 200
    assert listed.json == {
        "err": "",
        "ports": [
            {"process_name": "python3", "network": "tcp", "port": 8000},
            {"process_name": "", "network": "tcp", "port": 5432},
        ],
    }
    assert (
        api.get(f"/api/v2/workspaceagents/{agent_id}/listening-ports", headers=personas["dave"].auth).status_code == 404
    )
    assert api.get(f"/api/v2/workspaceagents/{agent_id}/listening-ports").status_code == 401


@pytest.mark.parametrize(
    "body",
    [{"ports": [{"port": 0}]}, {"ports": [{"port": 70000}]}, {"ports": [{"port": 80, "network": "udp"}]},
     {"ports": [{"port": 80}] * 257}, {"ports": "8000"}],
)  # fmt: skip
def test_bad_reports_are_refused(app: Flask, workspace: dict[str, Any], body: dict[str, Any]) -> None:
    reply = app.test_client().post("/api/v2/workspaceagents/me/listening-ports", json=body, headers=AGENT_HEADERS)
    assert reply.status_code == 400


def test_the_page_lists_ports_with_a_link_to_open_each(
    app: Flask, workspace: dict[str, Any], personas: dict[str, Persona]
) -> None:
    with app.app_context():  # the list is shown while the agent is connected
        services.mark_connected(agent_of(app, workspace, personas["carol"])["id"], "connection-1")
    body = {"ports": [{"process_name": "http.server", "port": 8000}]}
    assert app.test_client().post("/api/v2/workspaceagents/me/listening-ports", json=body, headers=AGENT_HEADERS)
    browser = app.test_client()
    sign_in(browser, "carol@example.com", PASSWORD)
    page = browser.get(f"/workspaces/{workspace['id']}").get_data(as_text=True)
    assert "Listening ports" in page and "http.server" in page
    assert 'href="/@carol/w1.main/apps/8000/"' in page  # path-based: no wildcard URL here
    app.config["SLIPWAY_SETTINGS"] = replace(app.config["SLIPWAY_SETTINGS"], wildcard_access_url="*.apps.test")
    page = browser.get(f"/workspaces/{workspace['id']}").get_data(as_text=True)
    assert 'href="http://8000--main--w1--carol.apps.test/"' in page
    # A port shared as https opens on its HTTPS port URL (Coder's {port}s--…), where the proxy speaks TLS to it.
    https = {"agent_name": "main", "port": 8000, "share_level": "owner", "protocol": "https"}
    shared = browser.post(
        f"/api/v2/workspaces/{workspace['id']}/port-share", json=https, headers=personas["carol"].auth
    )
    assert shared.status_code == 200, shared.get_data(as_text=True)
    page = browser.get(f"/workspaces/{workspace['id']}").get_data(as_text=True)
    assert 'href="http://8000s--main--w1--carol.apps.test/"' in page
    app.config["SLIPWAY_SETTINGS"] = replace(
        app.config["SLIPWAY_SETTINGS"], wildcard_access_url="", disable_path_apps=True
    )
    page = browser.get(f"/workspaces/{workspace['id']}").get_data(as_text=True)
    assert "http.server" in page and "/apps/8000/" not in page


@pytest.mark.parametrize(("persona", "status"), [("carol", 502), ("alice", 502), ("dave", 404), ("bob", 404)])
def test_a_port_opens_on_a_path_for_its_owner(app: Flask, workspace: dict[str, Any], persona: str, status: int) -> None:
    browser = app.test_client()
    sign_in(browser, f"{persona}@example.com", PASSWORD)
    # 502: past every check, to the agent (which never connected).
    assert browser.get("/@carol/w1.main/apps/8000/x?y=1").status_code == status
