"""A job's timings as stored (provisioning/timings.py, agents' script timings), gathered for the API and the chart."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select

from app.agents.models import AgentScriptTiming
from app.core.columns import rfc3339
from app.core.extensions import db
from app.provisioning.models import ProvisionerJob, ProvisionerJobTiming
from app.resources.models import AgentLogSource, WorkspaceAgent, WorkspaceResource
from protocol.codec import JsonObject
from protocol.timings import STAGE_CONNECT, WHOLE_STAGE


@dataclass(frozen=True)
class ScriptRun:
    timing: AgentScriptTiming
    display_name: str
    agent: WorkspaceAgent


@dataclass(frozen=True)
class AgentConnection:
    """From the agent's row (made when the build stored its resources) to its first connection: Coder's measure."""

    agent: WorkspaceAgent
    started_at: datetime
    ended_at: datetime


@dataclass(frozen=True)
class JobTimings:
    job: ProvisionerJob
    provisioner: list[ProvisionerJobTiming]
    scripts: list[ScriptRun]
    connections: list[AgentConnection]


def job_timings(job: ProvisionerJob, *, with_agents: bool = False) -> JobTimings:
    """Three queries whatever the number of bars: the job's, its agents', and their scripts' with their names."""
    rows = db.session.scalars(select(ProvisionerJobTiming).where(ProvisionerJobTiming.job_id == job.id)).all()
    # In start order; a stage before the resources that start with it.
    provisioner = sorted(rows, key=lambda row: (row.started_at, row.resource != WHOLE_STAGE, row.id))
    if not with_agents:
        return JobTimings(job, list(provisioner), [], [])
    agents = db.session.scalars(
        select(WorkspaceAgent)
        .join(WorkspaceResource, WorkspaceAgent.resource_id == WorkspaceResource.id)
        .where(WorkspaceResource.job_id == job.id)
        .order_by(WorkspaceAgent.name)
    ).all()
    by_id = {agent.id: agent for agent in agents}
    connections = [
        AgentConnection(agent, agent.created_at, agent.first_connected_at)
        for agent in agents
        if agent.first_connected_at is not None and agent.first_connected_at >= agent.created_at
    ]
    named = db.session.execute(
        select(AgentScriptTiming, AgentLogSource.display_name)
        .outerjoin(AgentLogSource, AgentLogSource.id == AgentScriptTiming.log_source_id)
        .where(AgentScriptTiming.agent_id.in_(by_id))
        .order_by(AgentScriptTiming.started_at, AgentScriptTiming.id)
    ).all()
    scripts = [ScriptRun(timing, name or "script", by_id[timing.agent_id]) for timing, name in named]
    return JobTimings(job, list(provisioner), scripts, connections)


def timings_json(timings: JobTimings) -> JsonObject:
    """Coder's WorkspaceBuildTimings, plus when the job was queued, picked up and ended."""
    job = timings.job
    return {
        "provisioner_timings": [
            {
                "job_id": job.id, "started_at": rfc3339(row.started_at), "ended_at": rfc3339(row.ended_at),
                "stage": row.stage, "source": row.source, "action": row.action, "resource": row.resource,
            }
            for row in timings.provisioner
        ],
        "agent_script_timings": [
            {
                "started_at": rfc3339(run.timing.started_at), "ended_at": rfc3339(run.timing.ended_at),
                "exit_code": run.timing.exit_code, "stage": run.timing.stage, "status": run.timing.status,
                "display_name": run.display_name, "workspace_agent_id": run.agent.id,
                "workspace_agent_name": run.agent.name,
            }
            for run in timings.scripts
        ],
        "agent_connection_timings": [
            {
                "started_at": rfc3339(connection.started_at), "ended_at": rfc3339(connection.ended_at),
                "stage": STAGE_CONNECT, "workspace_agent_id": connection.agent.id,
                "workspace_agent_name": connection.agent.name,
            }
            for connection in timings.connections
        ],
        "job": {
            "id": job.id, "queued_at": rfc3339(job.created_at), "started_at": rfc3339(job.started_at),
            "completed_at": rfc3339(job.completed_at), "status": job.status,
        },
    }  # fmt: skip
