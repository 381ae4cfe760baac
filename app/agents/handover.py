"""Handing a claimed prebuild's running agent its new token (issue 42 part 2; the claim is app/workspaces/claims.py).

The claim gives the prebuild's agents pending tokens, and its build gives them to Terraform. The agent's old token
is refused from the claim on, so only the control connection it already holds can carry the new one: while the
claim's build runs, that connection stays open (looked at every :data:`HANDOVER_POLL` seconds); once the build has
an agent of the same name whose token is the pending one, the token is handed over and the agent reconnects with it.
A build that failed, or that replaced the agent with one of another token, leaves the old agent simply outdated.
An agent whose connection dropped meanwhile may open it again with its old token (:func:`agent_awaiting_token`):
the only way in that token still has, until the new one is handed over.
"""

from __future__ import annotations

import hashlib
from typing import NamedTuple

from sqlalchemy import select

from app.agents.services import build_of
from app.core.extensions import db
from app.provisioning.models import SUCCEEDED
from app.resources.models import WorkspaceAgent, WorkspaceResource
from app.workspaces.services import latest_build

# How often a connection waiting for its claim's build looks again (only then, and only while that build runs).
HANDOVER_POLL = 0.1


class Handover(NamedTuple):
    waiting: bool  # the claim's build still runs: keep the connection open
    token: str = ""  # hand this over now ("" and not waiting: nothing to hand over, the agent is outdated)


def agent_awaiting_token(token: str) -> WorkspaceAgent | None:
    """The agent whose old ``token`` this is, while a claim's new token waits to be handed to it."""
    token_hash = hashlib.sha256(token.strip().encode()).hexdigest()
    agent: WorkspaceAgent | None = db.session.scalar(
        select(WorkspaceAgent)
        .where(WorkspaceAgent.token_hash == token_hash, WorkspaceAgent.pending_token.is_not(None))
        .order_by(WorkspaceAgent.created_at.desc())
        .limit(1)
    )
    return agent


def token_handover(agent_id: str) -> Handover:
    """What the control connection of an agent that is no longer current does (commits when a token is taken)."""
    agent = db.session.get(WorkspaceAgent, agent_id)
    build = build_of(agent) if agent is not None else None
    if agent is None or build is None or not agent.pending_token:
        return Handover(waiting=False)
    latest = latest_build(build.workspace)
    if latest.job.is_active:
        return Handover(waiting=True)
    token, agent.pending_token = agent.pending_token, None
    token_hash = hashlib.sha256(token.encode()).hexdigest()
    successor = db.session.scalar(
        select(WorkspaceAgent.id)
        .join(WorkspaceResource, WorkspaceResource.id == WorkspaceAgent.resource_id)
        .where(
            WorkspaceResource.job_id == latest.job_id,
            WorkspaceAgent.name == agent.name,
            WorkspaceAgent.token_hash == token_hash,
        )
    )
    db.session.commit()  # taken once: the token leaves the database as it leaves for the agent
    if latest.transition != "start" or latest.job.status != SUCCEEDED or successor is None:
        return Handover(waiting=False)
    return Handover(waiting=False, token=token)
