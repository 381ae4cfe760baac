"""Publishing notices: small messages that tell every web process (and waiting daemons) where to look again."""

from __future__ import annotations

import logging

from app.core.redis_client import get_redis
from protocol.agentapi import CONTROL_RECHECK
from protocol.channels import (
    AGENT_CONTROL_CHANNEL_PREFIX,
    AGENT_EVENTS_CHANNEL_PREFIX,
    JOB_LOG_CHANNEL_PREFIX,
    JOB_QUEUED_CHANNEL_PREFIX,
)

log = logging.getLogger(__name__)


def publish_job_notice(job_id: str, *, end: bool = False) -> None:
    """New lines (or the end, or a new status) of a job are in the database; streams read them themselves."""
    _publish(JOB_LOG_CHANNEL_PREFIX + job_id, b"end" if end else b"logs", f"job {job_id}")


def publish_agent_notice(agent_id: str) -> None:
    """An agent changed (connection, lifecycle, logs, metadata, app health); pages read what from the database."""
    _publish(AGENT_EVENTS_CHANNEL_PREFIX + agent_id, b"changed", f"agent {agent_id}")


def publish_agent_recheck(agent_id: str) -> None:
    """The agent's control connection (whichever process holds it) looks at the database now, not at its next
    heartbeat: a claim gave the agent a new token to be handed over."""
    _publish(AGENT_CONTROL_CHANNEL_PREFIX + agent_id, CONTROL_RECHECK, f"agent {agent_id}")


def publish_job_queued(queue: str) -> None:
    """A job is waiting on ``queue``: daemons waiting over HTTP for that queue try to acquire one."""
    _publish(JOB_QUEUED_CHANNEL_PREFIX + queue, b"queued", f"queue {queue}")


def _publish(channel: str, message: bytes, what: str) -> None:
    try:
        get_redis().publish(channel, message)
    except Exception:  # a viewer misses a nudge and catches up on its next poll or heartbeat
        log.warning("could not publish a notice for %s", what, exc_info=True)
