"""Every name Slipway uses in Redis, in one place: queues that wake daemons, and the notices and messages its
web processes pass to one another. Redis is trusted with none of their meaning (README, "What Redis is trusted
with"): a notice only says "look in the database", and a dial is signed by the server."""

from __future__ import annotations

# RQ queues, one per normalised tag set (protocol/tags.py names them): only wake a daemon that may take the job.
QUEUE_PREFIX = "slipway:jobs:"
# "New lines (or the end) of job <id> are in the database."
JOB_LOG_CHANNEL_PREFIX = "slipway:job-logs:"
# "A job was queued on <queue name>": wakes daemons waiting over HTTP (POST /api/v2/provisionerd/jobs/wait).
JOB_QUEUED_CHANNEL_PREFIX = "slipway:job-queued:"
# "Agent <id> changed (connection, lifecycle, logs, metadata, app health)": streams re-read it.
AGENT_EVENTS_CHANNEL_PREFIX = "slipway:agent-events:"
# Signed messages for agent <id>'s control connection (dials), delivered by whichever process holds it.
AGENT_CONTROL_CHANNEL_PREFIX = "slipway:agent-control:"
# The two lists and liveness keys of tunnel <id>, and the signed record of which agent it was dialed to.
TUNNEL_KEY_PREFIX = "slipway:tunnel:"
