"""Storing what a daemon reported (resources, agents, their scripts' log sources) and reading it back."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import replace

from sqlalchemy import select
from sqlalchemy.orm import selectinload

from app.core.columns import new_id
from app.core.extensions import db
from app.resources.models import AgentLogSource, WorkspaceAgent, WorkspaceResource
from protocol.resources import Agent, Resource, Script

# Coder's default when a template sets no connection_timeout (0 means "never time out").
DEFAULT_CONNECTION_TIMEOUT = 120


def store_resources(job_id: str, transition: str, resources: Sequence[Resource]) -> None:
    """Insert the resources a daemon reported for a job's transition, with their agents."""
    for resource in resources:
        agents = [_agent_row(agent) for agent in resource.agents]
        db.session.add(
            WorkspaceResource(
                job_id=job_id,
                transition=transition,
                name=resource.name[:255],
                type=resource.type[:255],
                kind="computational" if agents else "peripheral",
                lifecycle=resource.lifecycle or "persistent",
                hide=resource.hide,
                icon=resource.icon[:255],
                daily_cost=resource.daily_cost,
                # A sensitive value is never shown (only "*****"), so it need not be stored at all.
                metadata_items=tuple(replace(item, value="") if item.sensitive else item for item in resource.metadata),
                agents=agents,
            )
        )


def _agent_row(agent: Agent) -> WorkspaceAgent:
    row = WorkspaceAgent(
        id=new_id(),
        name=agent.name[:64],
        os=agent.os[:16],
        arch=agent.arch[:16],
        directory=agent.dir,
        connection_timeout=agent.connection_timeout,
        token_hash=hashlib.sha256(agent.token.encode()).hexdigest() if agent.token else None,
    )
    # The token is the agent's secret: only its hash is kept.
    row.stored_definition = replace(agent, token="", scripts=_scripts_with_log_sources(row, agent))
    return row


def _scripts_with_log_sources(row: WorkspaceAgent, agent: Agent) -> tuple[Script, ...]:
    """The agent's scripts, the legacy startup/shutdown scripts among them, each with a log source of its own."""
    scripts = list(agent.scripts)
    if agent.startup_script:
        scripts.insert(0, Script(display_name="Startup Script", script=agent.startup_script, run_on_start=True))
    if agent.shutdown_script:
        scripts.append(Script(display_name="Shutdown Script", script=agent.shutdown_script, run_on_stop=True))
    with_sources = []
    for script in scripts:
        source = AgentLogSource(
            id=new_id(), display_name=(script.display_name or "Script")[:128], icon=script.icon[:255]
        )
        row.log_sources.append(source)
        with_sources.append(replace(script, log_source_id=source.id))
    return tuple(with_sources)


def job_resources(job_id: str, transition: str | None = None) -> list[WorkspaceResource]:
    return jobs_resources([job_id], transition).get(job_id, [])


def jobs_resources(job_ids: Sequence[str], transition: str | None = None) -> dict[str, list[WorkspaceResource]]:
    """The resources of several jobs (with their agents and log sources) in a fixed number of queries."""
    if not job_ids:
        return {}
    query = (
        select(WorkspaceResource)
        .where(WorkspaceResource.job_id.in_(set(job_ids)))
        .options(selectinload(WorkspaceResource.agents).selectinload(WorkspaceAgent.log_sources))
        .order_by(WorkspaceResource.type, WorkspaceResource.name)
    )
    if transition is not None:
        query = query.where(WorkspaceResource.transition == transition)
    found: dict[str, list[WorkspaceResource]] = {}
    for resource in db.session.scalars(query):
        found.setdefault(resource.job_id, []).append(resource)
    return found
