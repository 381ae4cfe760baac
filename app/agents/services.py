"""What agents report, and which agent a token belongs to. Agents reach these over HTTP (``agent_api.py``)."""

from __future__ import annotations

import hashlib
import logging
from datetime import datetime

from sqlalchemy import delete, func, select, update

from app.agents.models import (
    CONNECTED,
    CONNECTION_HISTORY,
    DISCONNECTED,
    AgentConnectionEvent,
    AgentLog,
    AgentScriptTiming,
)
from app.core.columns import parse_rfc3339, rfc3339, utcnow
from app.core.errors import InvalidInput, Unauthorized
from app.core.extensions import db, rows_changed
from app.events.notices import publish_agent_notice
from app.resources.models import WorkspaceAgent, WorkspaceResource
from app.workspaces.models import Workspace, WorkspaceBuild
from app.workspaces.services import latest_build
from protocol.agentapi import (
    DEFAULT_LOG_LIMIT_BYTES,
    MAX_LOG_LINE_CHARS,
    AgentLogBatch,
    AgentLogReply,
    AppHealthReport,
    LifecycleReport,
    MetadataReport,
    Startup,
)
from protocol.timings import ScriptTiming

log = logging.getLogger(__name__)

MAX_AGENT_LOG_BYTES = DEFAULT_LOG_LIMIT_BYTES
MAX_METADATA_VALUE_BYTES = 2048
MAX_METADATA_BATCH_BYTES = 6144
NO_AGENT = (
    "No agent of a current workspace build has this token: the build that created the agent may still be "
    "running, or the workspace was stopped or rebuilt."
)


def build_of(agent: WorkspaceAgent) -> WorkspaceBuild | None:
    build: WorkspaceBuild | None = db.session.scalar(
        select(WorkspaceBuild)
        .join(WorkspaceResource, WorkspaceResource.job_id == WorkspaceBuild.job_id)
        .where(WorkspaceResource.id == agent.resource_id)
    )
    return build


def is_current(build: WorkspaceBuild) -> bool:
    """An agent may talk to the server while its build is the workspace's latest, and also while a stop or
    delete of it runs (so it can report its shutdown); any other build's agents are outdated."""
    if build.transition != "start" or build.workspace.deleted:
        return False
    latest = latest_build(build.workspace)
    if latest.id == build.id:
        return True
    return (
        latest.build_number == build.build_number + 1
        and latest.transition in ("stop", "delete")
        and latest.job.is_active
    )


def agent_for_token(token: str) -> WorkspaceAgent:
    """The agent a token authenticates: the newest agent row with that token whose build is current.

    A token outlives builds (the `coder_agent` resource keeps it across stop and start), so older rows with the
    same token exist; only the current build's row counts."""
    token = token.strip()
    if not token:
        raise Unauthorized("Send the agent token in the Slipway-Agent-Token header.")
    token_hash = hashlib.sha256(token.encode()).hexdigest()
    agent: WorkspaceAgent | None = db.session.scalar(
        select(WorkspaceAgent)
        .join(WorkspaceResource, WorkspaceResource.id == WorkspaceAgent.resource_id)
        .join(WorkspaceBuild, WorkspaceBuild.job_id == WorkspaceResource.job_id)
        .join(Workspace, Workspace.id == WorkspaceBuild.workspace_id)
        .where(WorkspaceAgent.token_hash == token_hash, Workspace.deleted.is_(False))
        .order_by(WorkspaceAgent.created_at.desc())
        .limit(1)
    )
    build = build_of(agent) if agent is not None else None
    if agent is None or build is None or not is_current(build):
        raise Unauthorized(NO_AGENT)
    return agent


def shown_agents(workspace: Workspace) -> list[tuple[WorkspaceAgent, WorkspaceBuild]]:
    """The agents a workspace's page shows: those of its latest build, or, while a stop or delete runs, those of
    the build it is stopping (they are still current: their shutdown is worth watching)."""
    builds = db.session.scalars(
        select(WorkspaceBuild)
        .where(WorkspaceBuild.workspace_id == workspace.id)
        .order_by(WorkspaceBuild.build_number.desc())
        .limit(2)
    ).all()
    if not builds:
        return []
    shown = builds[0]
    if shown.transition in ("stop", "delete") and shown.job.is_active and len(builds) == 2:
        shown = builds[1]
    if not is_current(shown):
        return []
    resources = db.session.scalars(select(WorkspaceResource).where(WorkspaceResource.job_id == shown.job_id)).all()
    return [(agent, shown) for resource in resources for agent in resource.agents]


def agent_is_current(agent_id: str) -> bool:
    agent = db.session.get(WorkspaceAgent, agent_id)
    build = build_of(agent) if agent is not None else None
    return build is not None and is_current(build)


# --- Reports -------------------------------------------------------------------------------------------------


def record_startup(agent: WorkspaceAgent, startup: Startup) -> None:
    agent.version = startup.version
    agent.expanded_directory = startup.expanded_directory
    db.session.commit()
    publish_agent_notice(agent.id)


def record_lifecycle(agent: WorkspaceAgent, report: LifecycleReport) -> None:
    changed_at = parse_rfc3339(report.changed_at) or utcnow()
    agent.lifecycle_state = report.state
    agent.lifecycle_changed_at = changed_at
    if report.state == "starting":
        agent.started_at = changed_at
    elif report.state in ("ready", "start_timeout", "start_error"):
        agent.ready_at = changed_at
    db.session.commit()
    publish_agent_notice(agent.id)


def record_script_timing(agent: WorkspaceAgent, timing: ScriptTiming) -> None:
    """One script run, for the build's waterfall. 400 for times that do not parse or run backwards, or a script
    this agent does not have: the agent sends what it measured, so either is a bug worth hearing about."""
    started, ended = parse_rfc3339(timing.started_at), parse_rfc3339(timing.ended_at)
    if started is None or ended is None or ended < started:
        raise InvalidInput("started_at and ended_at must be RFC 3339 times, the end not before the start.")
    if timing.log_source_id not in {source.id for source in agent.log_sources}:
        raise InvalidInput(f"{timing.log_source_id!r} is not a script of this agent.")
    db.session.add(
        AgentScriptTiming(
            agent_id=agent.id, log_source_id=timing.log_source_id, stage=timing.stage, status=timing.status,
            exit_code=timing.exit_code, started_at=started, ended_at=ended,
        )
    )  # fmt: skip
    db.session.commit()


def append_logs(agent: WorkspaceAgent, batch: AgentLogBatch) -> AgentLogReply:
    """Store a batch of script output, capped at 1 MiB per agent; past the cap one notice says lines were lost."""
    if agent.logs_overflowed:
        return AgentLogReply(log_limit_exceeded=True)
    sources = {source.id for source in agent.log_sources}
    rows = []
    for line in batch.logs:
        output = line.output[:MAX_LOG_LINE_CHARS]
        size = len(output.encode())
        source_id = line.log_source_id if line.log_source_id in sources else None
        if agent.logs_length + size > MAX_AGENT_LOG_BYTES:
            agent.logs_overflowed = True
            notice = (
                f"Log limit of {MAX_AGENT_LOG_BYTES // 1024} KiB reached for this agent: "
                "further script output is not stored (it is still in the script's log file in the workspace)."
            )
            rows.append(AgentLog(agent_id=agent.id, source_id=source_id, level="warn", output=notice))
            break
        agent.logs_length += size
        created_at = parse_rfc3339(line.created_at) or utcnow()
        rows.append(
            AgentLog(agent_id=agent.id, source_id=source_id, level=line.level, output=output, created_at=created_at)
        )
    db.session.add_all(rows)
    db.session.commit()
    if rows:
        publish_agent_notice(agent.id)
    return AgentLogReply(log_limit_exceeded=agent.logs_overflowed)


def agent_logs(agent_id: str, after: int = 0, limit: int = 10_000) -> list[AgentLog]:
    query = select(AgentLog).where(AgentLog.agent_id == agent_id, AgentLog.id > after).order_by(AgentLog.id)
    return list(db.session.scalars(query.limit(limit)))


def record_metadata(agent: WorkspaceAgent, report: MetadataReport) -> None:
    """Reference §1.6: the server's clock stamps results; values and errors are capped; keys the template does
    not declare are ignored; a batch stops taking keys once their summed length passes 6 KiB."""
    declared = {block.key for block in agent.definition.metadata}
    results = dict(agent.metadata_results)
    now, keys_length = rfc3339(utcnow()) or "", 0
    for item in report.metadata:
        if item.key not in declared:
            continue
        keys_length += len(item.key)
        if keys_length > MAX_METADATA_BATCH_BYTES:
            break
        results[item.key] = {
            "value": _capped(item.value, "value"),
            "error": _capped(item.error, "error"),
            "collected_at": now,
        }
    agent.metadata_results = results
    db.session.commit()
    publish_agent_notice(agent.id)


def _capped(text: str, what: str) -> str:
    size = len(text.encode())
    if size <= MAX_METADATA_VALUE_BYTES:
        return text
    return f"{what} of {size} bytes exceeded {MAX_METADATA_VALUE_BYTES} bytes"


def record_app_health(agent: WorkspaceAgent, report: AppHealthReport) -> None:
    checked = {app.slug for app in agent.definition.apps if app.healthcheck is not None and app.healthcheck.url}
    updated = dict(agent.app_health)
    for slug, health in report.healths.items():
        if slug not in checked:
            raise InvalidInput(f"{slug!r} is not an app of this agent with a healthcheck.")
        updated[slug] = health
    if updated != agent.app_health:
        agent.app_health = updated
        db.session.commit()
        publish_agent_notice(agent.id)


# --- The control connection ---------------------------------------------------------------------------------


def mark_connected(agent_id: str, connection_id: str) -> None:
    now = utcnow()
    db.session.execute(
        update(WorkspaceAgent)
        .where(WorkspaceAgent.id == agent_id)
        .values(
            connection_id=connection_id,
            last_connected_at=now,
            first_connected_at=func.coalesce(WorkspaceAgent.first_connected_at, now),
        )
    )
    _record_connection_event(agent_id, connection_id, CONNECTED, now)
    db.session.commit()
    publish_agent_notice(agent_id)


def record_heartbeat(agent_id: str, connection_id: str) -> bool:
    """Stamp the connection as alive; False when another connection of the agent has taken over since."""
    result = db.session.execute(
        update(WorkspaceAgent)
        .where(WorkspaceAgent.id == agent_id, WorkspaceAgent.connection_id == connection_id)
        .values(last_connected_at=utcnow())
    )
    db.session.commit()
    return bool(rows_changed(result))


def mark_disconnected(agent_id: str, connection_id: str) -> None:
    """Only the connection that counts may mark the agent gone (a newer one may be open on another replica)."""
    now = utcnow()
    result = db.session.execute(
        update(WorkspaceAgent)
        .where(WorkspaceAgent.id == agent_id, WorkspaceAgent.connection_id == connection_id)
        .values(disconnected_at=now)
    )
    changed = rows_changed(result)
    if changed:
        _record_connection_event(agent_id, connection_id, DISCONNECTED, now)
    db.session.commit()
    if changed:
        publish_agent_notice(agent_id)


def _record_connection_event(agent_id: str, connection_id: str, event: str, at: datetime) -> None:
    """Add the event to the agent's history and drop what is past its newest ``CONNECTION_HISTORY``."""
    db.session.add(AgentConnectionEvent(agent_id=agent_id, connection_id=connection_id, event=event, at=at))
    db.session.flush()
    oldest_kept = (
        select(AgentConnectionEvent.id)
        .where(AgentConnectionEvent.agent_id == agent_id)
        .order_by(AgentConnectionEvent.id.desc())
        .offset(CONNECTION_HISTORY - 1)
        .limit(1)
        .scalar_subquery()
    )
    db.session.execute(
        delete(AgentConnectionEvent).where(
            AgentConnectionEvent.agent_id == agent_id, AgentConnectionEvent.id < oldest_kept
        )
    )


def connection_history(agent_id: str) -> list[AgentConnectionEvent]:
    """The agent's kept connection events, newest first."""
    return list(
        db.session.scalars(
            select(AgentConnectionEvent)
            .where(AgentConnectionEvent.agent_id == agent_id)
            .order_by(AgentConnectionEvent.id.desc())
        )
    )
