"""An agent's listening ports: kept in Redis as the agent last reported them, shown with a link to open each.

Redis rather than a column: the list changes whenever a process starts or stops listening, is worth nothing once
the agent stops reporting (it expires), and every web replica reads it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import redis

from app.agents.apps import app_path, subdomain_url
from app.core.signing import Signer
from app.events.notices import publish_agent_notice
from protocol.agentapi import ListeningPort, ListeningPortsReport

_KEY = "slipway:agent-ports:{}"
# Three missed refreshes of the agent (agent/ports.py REFRESH_INTERVAL): it stopped, or lost its connection.
LIFETIME_SECONDS = 180
_PURPOSE = "listening-ports"


def record_listening_ports(client: redis.Redis, signer: Signer, agent_id: str, report: ListeningPortsReport) -> None:
    ports = json.dumps([port.to_json() for port in report.ports], sort_keys=True)
    previous = client.set(_KEY.format(agent_id), _signed(signer, agent_id, ports), ex=LIFETIME_SECONDS, get=True)
    if not isinstance(previous, bytes | str) or _verified(signer, agent_id, previous) != ports:
        publish_agent_notice(agent_id)  # the workspace page redraws the agent's panel


def listening_ports(client: redis.Redis, signer: Signer, agent_id: str) -> list[ListeningPort]:
    """What the agent reported last ([] when it has not reported for a while)."""
    stored = client.get(_KEY.format(agent_id))
    ports = _verified(signer, agent_id, stored) if stored is not None else None
    if ports is None:
        return []
    return [ListeningPort.from_json(item) for item in json.loads(ports)]


def _signed(signer: Signer, agent_id: str, ports: str) -> str:
    # Redis is shared with daemons: the server believes only what it signed itself.
    return json.dumps({"ports": ports, "sig": signer.sign(_PURPOSE, agent_id, ports)})


def _verified(signer: Signer, agent_id: str, stored: bytes | str) -> str | None:
    try:
        value = json.loads(stored)
        ports, signature = str(value["ports"]), str(value["sig"])
    except (ValueError, KeyError, TypeError):
        return None
    return ports if signer.verify(signature, _PURPOSE, agent_id, ports) else None


@dataclass(frozen=True)
class PortLink:
    port: int
    process_name: str
    url: str  # "" when neither a port URL nor a path may open it


def port_links(
    ports: list[ListeningPort],
    owner: str,
    workspace: str,
    agent: str,
    *,
    path_apps: bool,
    https_ports: frozenset[int] = frozenset(),
) -> list[PortLink]:
    """Each port with where it opens: its port URL on the wildcard (the HTTPS one for ``https_ports``, those shared
    with the https protocol), else its path, if path apps are on."""
    links = []
    for port in ports:
        url = subdomain_url(owner, workspace, agent, str(port.port), tls=port.port in https_ports)
        if url is None and path_apps:
            url = app_path(owner, workspace, agent, str(port.port))
        links.append(PortLink(port.port, port.process_name, url or ""))
    return links
