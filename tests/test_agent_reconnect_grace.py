"""An agent that has only just disconnected is most likely moving to another replica (its own drained): tunnels and
apps asked for meanwhile wait for it, briefly, instead of failing; an agent gone for longer is refused at once."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from flask import Flask

from app.agents import services
from app.agents.access import RECONNECT_GRACE_SECONDS, ensure_reachable, get_agent_for
from app.core.columns import utcnow
from app.core.config import Settings
from app.core.errors import Conflict
from app.core.extensions import db
from app.resources.models import WorkspaceAgent
from app.users.models import User
from tests.conftest import Persona, make_settings
from tests.support.dev_urls import create_workspace

pytestmark = pytest.mark.databases("sqlite")


@pytest.fixture
def settings(tmp_path: Path, database_url: str, redis_server: str) -> Settings:
    return make_settings(tmp_path, database_url, redis_server, provisioner_daemon_psk="test-daemon-psk")


@pytest.fixture
def agent_id(app: Flask, personas: dict[str, Persona]) -> str:
    workspace: dict[str, Any] = create_workspace(app, personas)
    found = app.test_client().get(f"/api/v2/workspaces/{workspace['id']}", headers=personas["carol"].auth)
    return str(found.json["latest_build"]["resources"][0]["agents"][0]["id"])


def reachable(app: Flask, persona: Persona, agent_id: str) -> None:
    with app.app_context():
        ensure_reachable(get_agent_for(db.session.get(User, persona.id), agent_id, need="connect"))


def test_a_request_waits_for_an_agent_that_is_reconnecting(
    app: Flask, personas: dict[str, Persona], agent_id: str
) -> None:
    with app.app_context():
        services.mark_connected(agent_id, "on-the-draining-replica")
        services.mark_disconnected(agent_id, "on-the-draining-replica")
    back = threading.Event()

    def reconnect() -> None:
        back.wait(timeout=60)
        with app.app_context():
            services.mark_connected(agent_id, "on-a-replica-that-stays")

    reconnecting = threading.Thread(target=reconnect, daemon=True)
    reconnecting.start()
    waited: list[BaseException | None] = []

    def ask() -> None:
        try:
            reachable(app, personas["carol"], agent_id)
            waited.append(None)
        except Conflict as exc:
            waited.append(exc)

    asking = threading.Thread(target=ask, daemon=True)
    asking.start()
    asking.join(timeout=0.5)
    assert asking.is_alive(), f"the request did not wait for the reconnecting agent: {waited}"
    back.set()  # the agent is connected again, to another replica
    asking.join(timeout=60)
    reconnecting.join(timeout=60)
    assert waited == [None]


def test_an_agent_gone_for_longer_is_refused_at_once(app: Flask, personas: dict[str, Persona], agent_id: str) -> None:
    with app.app_context():
        services.mark_connected(agent_id, "long-gone")
        services.mark_disconnected(agent_id, "long-gone")
        agent = db.session.get(WorkspaceAgent, agent_id)
        assert agent is not None
        agent.last_connected_at = utcnow() - timedelta(seconds=RECONNECT_GRACE_SECONDS + 10)
        agent.disconnected_at = utcnow() - timedelta(seconds=RECONNECT_GRACE_SECONDS + 5)
        db.session.commit()
    began = time.monotonic()
    with pytest.raises(Conflict, match="lost its connection"):
        reachable(app, personas["carol"], agent_id)
    assert time.monotonic() - began < RECONNECT_GRACE_SECONDS
