"""``/api/v2/provisionerd/``: the internal protocol of provisioner daemons (``protocol/provisionerd.py``)."""

from __future__ import annotations

import hmac
from contextlib import nullcontext

from flask import Blueprint, Response, current_app, request

from app.auth.access import bearer_token
from app.core.config import Settings, draining_marker
from app.core.errors import Forbidden, InvalidInput, Unauthorized
from app.core.extensions import csrf
from app.core.limits import live_connection, person_budgets
from app.core.redis_client import get_redis
from app.core.validation import message_body
from app.events import get_relay
from app.provisioning import daemons
from app.provisioning.daemons import DaemonCredential
from app.provisioning.keys import resolve_key
from app.provisioning.models import ProvisionerDaemon
from app.users.tokens import resolve_token
from protocol.codec import Message
from protocol.provisionerd import (
    API_PREFIX,
    DAEMON_HEADER,
    KEY_HEADER,
    PSK_HEADER,
    CommitQuota,
    JobCompletion,
    JobFailure,
    LogBatch,
    Registration,
    WaitForJob,
)

bp = Blueprint("provisionerd_api", __name__, url_prefix=API_PREFIX)
# Daemons authenticate with a pre-shared key header, not a cookie.
csrf.exempt(bp)

NO_CREDENTIAL = (
    "A provisioner daemon must authenticate with a pre-shared key (--psk), a provisioner key (--key) "
    "or a user session token (slipway login)."
)
# Completion carries the Terraform state, which outgrows the 1 MiB limit of ordinary JSON calls.
DAEMON_BODY_LIMIT = 64 * 1024 * 1024


def _settings() -> Settings:
    settings: Settings = current_app.config["SLIPWAY_SETTINGS"]
    return settings


def _reply(message: Message | None, status: int = 200) -> Response:
    if message is None:
        return Response(status=204)
    return Response(message.dumps(), status=status, mimetype="application/json")


def daemon_credential() -> DaemonCredential:
    """Exactly one of: the built-in or operator PSK, a provisioner key, a user's token (reference §3.2)."""
    settings = _settings()
    psk, key, token = request.headers.get(PSK_HEADER, ""), request.headers.get(KEY_HEADER, ""), bearer_token()
    sent = [name for name, value in (("a PSK", psk), ("a provisioner key", key), ("a user token", token)) if value]
    if len(sent) > 1:
        raise InvalidInput(f"Send one credential, not {' and '.join(sent)}.")
    if psk:
        if settings.builtin_daemon_psk and hmac.compare_digest(psk, settings.builtin_daemon_psk):
            return DaemonCredential("builtin")
        if settings.provisioner_daemon_psk and hmac.compare_digest(psk, settings.provisioner_daemon_psk):
            return DaemonCredential("psk")
        raise Unauthorized("The provisioner daemon PSK is wrong (or the server has none configured).")
    if key:
        return DaemonCredential("key", key=resolve_key(key))
    if token:
        user = resolve_token(token)
        if user.is_read_only:
            raise Forbidden("Auditors change nothing: they cannot run provisioner daemons.")
        return DaemonCredential("user", user=user)
    raise Unauthorized(NO_CREDENTIAL)


@bp.before_request
def require_daemon_credential() -> None:
    request.max_content_length = DAEMON_BODY_LIMIT
    request.environ["slipway.daemon_credential"] = daemon_credential()


def _daemon() -> ProvisionerDaemon:
    credential: DaemonCredential = request.environ["slipway.daemon_credential"]
    daemon_id = request.headers.get(DAEMON_HEADER, "")
    if not daemon_id:
        raise InvalidInput(f"Send the daemon id in the {DAEMON_HEADER} header.")
    return daemons.get_daemon(credential, daemon_id)


@bp.post("/register")
def register() -> Response:
    credential: DaemonCredential = request.environ["slipway.daemon_credential"]
    return _reply(daemons.register_daemon(credential, message_body(Registration), _settings()), 201)


@bp.post("/heartbeat")
def heartbeat() -> Response:
    """An idle daemon's proof of life; refused (and the daemon stops) once its credential is gone."""
    daemons.heartbeat(_daemon())
    return Response("{}", mimetype="application/json")


@bp.post("/jobs/wait")
def wait() -> Response:
    """A pending job this daemon may run, to acquire (200), or 204 when none came within the timeout: ask again.

    A long poll: one started with a person's token holds a live slot in that person's budget while it waits (429
    beyond), as their streams do; the operator's daemons (PSK, provisioner key) are not counted."""
    wanted = message_body(WaitForJob)
    daemon, settings = _daemon(), _settings()
    credential: DaemonCredential = request.environ["slipway.daemon_credential"]
    daemons.heartbeat(daemon)  # alive even when refused a slot: it asks again shortly
    held = live_connection(budgets=person_budgets(settings, credential.user.id)) if credential.user else nullcontext()
    with held:
        queues = daemon.queue_names(settings.provisioner_untagged_jobs)
        # A draining replica (SIGTERM: app/server/supervisor.py) answers after one look, and a poll under way within a
        # recheck: the daemon asks again, through the load balancer, of a replica that stays.
        draining = draining_marker(settings.data_dir)
        waited = daemons.wait_for_job(
            daemon.id, queues, wanted.timeout_seconds, get_relay(), get_redis(), daemon.terraform_version,
            until=draining.exists,
        )  # fmt: skip
    return _reply(waited)


@bp.post("/jobs/<job_id>/acquire")
def acquire(job_id: str) -> Response:
    return _reply(daemons.acquire_job(_daemon(), job_id, _settings()))


@bp.post("/jobs/<job_id>/logs")
def logs(job_id: str) -> Response:
    return _reply(daemons.append_logs(_daemon(), job_id, message_body(LogBatch)))


@bp.post("/jobs/<job_id>/quota")
def quota(job_id: str) -> Response:
    """Coder's CommitQuota: asked between plan and apply by a build under quotas; ``{ok, message}``."""
    return _reply(daemons.commit_quota(_daemon(), job_id, message_body(CommitQuota)))


@bp.post("/jobs/<job_id>/complete")
def complete(job_id: str) -> Response:
    # A malformed outcome is a 400 naming the field, and the job goes on running: the daemon logs the refusal, and the
    # job ends by the daemon's next report or the hang timeout, never as "failed" for a build that may have worked.
    daemons.complete_job(_daemon(), job_id, message_body(JobCompletion))
    return _reply(None)


@bp.post("/jobs/<job_id>/fail")
def fail(job_id: str) -> Response:
    daemons.fail_job(_daemon(), job_id, message_body(JobFailure))
    return _reply(None)
