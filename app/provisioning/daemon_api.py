"""``/api/v2/provisionerd/``: the internal protocol of provisioner daemons (may change with the daemon)."""

from __future__ import annotations

import hmac

from flask import Blueprint, Response, current_app, jsonify, request

from app.auth.access import bearer_token
from app.auth.tokens import resolve_token
from app.blueprints import API_PREFIX, json_body
from app.config import Settings
from app.errors import InvalidInput, Unauthorized
from app.extensions import csrf
from app.provisioning import daemons
from app.provisioning.daemons import DaemonCredential
from app.provisioning.keys import resolve_key
from app.provisioning.models import ProvisionerDaemon

bp = Blueprint("provisionerd_api", __name__, url_prefix=f"{API_PREFIX}/provisionerd")
# Daemons authenticate with a pre-shared key header, not a cookie.
csrf.exempt(bp)

PSK_HEADER = "Slipway-Provisioner-PSK"
KEY_HEADER = "Slipway-Provisioner-Key"
DAEMON_HEADER = "Slipway-Provisioner-Daemon"
NO_CREDENTIAL = (
    "A provisioner daemon must authenticate with a pre-shared key (--psk), a provisioner key (--key) "
    "or a user session token (slipway login)."
)


def _settings() -> Settings:
    settings: Settings = current_app.config["SLIPWAY_SETTINGS"]
    return settings


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
        return DaemonCredential("user", user=resolve_token(token))
    raise Unauthorized(NO_CREDENTIAL)


# Completion carries the Terraform state, which outgrows the 1 MiB limit of ordinary JSON calls.
DAEMON_BODY_LIMIT = 64 * 1024 * 1024


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
def register() -> tuple[Response, int]:
    body = json_body()
    tags = body.get("tags") or {}
    if not isinstance(tags, dict) or not all(isinstance(v, str) for v in tags.values()):
        raise InvalidInput("tags must be an object of strings.")
    daemon, queues = daemons.register_daemon(
        request.environ["slipway.daemon_credential"],
        str(body.get("name", "")),
        tags,
        str(body.get("version", "")),
        _settings(),
    )
    settings = _settings()
    reply = {
        "daemon_id": daemon.id,
        "name": daemon.name,
        "tags": daemon.tags,
        "queues": queues,
        "redis_url": settings.advertised_redis_url,
        "heartbeat_seconds": settings.provisioner_heartbeat_interval,
        "force_cancel_seconds": settings.provisioner_force_cancel_interval,
    }
    return jsonify(reply), 201


@bp.post("/heartbeat")
def heartbeat() -> Response:
    """An idle daemon's proof of life; refused (and the daemon stops) once its credential is gone."""
    daemons.heartbeat(_daemon())
    return jsonify({})


@bp.post("/jobs/<job_id>/acquire")
def acquire(job_id: str) -> Response:
    return jsonify(daemons.acquire_job(_daemon(), job_id, _settings()))


@bp.post("/jobs/<job_id>/logs")
def logs(job_id: str) -> Response:
    lines = json_body().get("logs", [])
    if not isinstance(lines, list) or not all(isinstance(line, dict) for line in lines):
        raise InvalidInput("logs must be a list of objects.")
    return jsonify(daemons.append_logs(_daemon(), job_id, lines))


@bp.post("/jobs/<job_id>/complete")
def complete(job_id: str) -> tuple[str, int]:
    daemons.complete_job(_daemon(), job_id, json_body())
    return "", 204


@bp.post("/jobs/<job_id>/fail")
def fail(job_id: str) -> tuple[str, int]:
    daemons.fail_job(_daemon(), job_id, json_body())
    return "", 204
