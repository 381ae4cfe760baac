"""Pausing and resuming the reconciler, and what the pools hold (the API, the CLI and the template page)."""

from __future__ import annotations

from app.core.errors import InvalidInput
from app.core.extensions import db
from app.prebuilds.models import SETTINGS_ROW_ID, PrebuildsSettings
from app.prebuilds.planning import PoolSummary
from app.prebuilds.reconciler import current_plan
from protocol.codec import JSON, JsonObject


def is_paused() -> bool:
    row = db.session.get(PrebuildsSettings, SETTINGS_ROW_ID)
    return row is not None and row.reconciliation_paused


def settings_json() -> JsonObject:
    return {"reconciliation_paused": is_paused()}


def update_settings(body: JsonObject) -> JsonObject:
    paused: JSON = body.get("reconciliation_paused")
    if not isinstance(paused, bool):
        raise InvalidInput(
            "reconciliation_paused must be true or false.",
            validations=[{"field": "reconciliation_paused", "detail": "Send true or false."}],
        )
    row = db.session.get(PrebuildsSettings, SETTINGS_ROW_ID)
    if row is None:
        row = PrebuildsSettings(id=SETTINGS_ROW_ID, reconciliation_paused=paused)
        db.session.add(row)
    else:
        row.reconciliation_paused = paused
    db.session.commit()
    return settings_json()


def pool_json(pool: PoolSummary) -> JsonObject:
    return {
        "template_id": pool.template_id,
        "preset_name": pool.preset_name,
        "desired": pool.desired,
        "running": pool.running,
        "ready": pool.ready,
        "building": pool.building,
        "failures": pool.failures,
        "backoff_until": pool.backoff_until.isoformat() if pool.backoff_until else None,
        "failure_reason": pool.failure_reason,
        "expired": pool.expired,
    }


def pools(template_id: str | None = None) -> list[PoolSummary]:
    return [pool for pool in current_plan().pools if template_id is None or pool.template_id == template_id]


def status_json() -> JsonObject:
    return {**settings_json(), "pools": [pool_json(pool) for pool in pools()]}
