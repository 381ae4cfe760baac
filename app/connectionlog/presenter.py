"""A connection in Coder's shape (codersdk.ConnectionLog): web_info for apps and browser port forwards, ssh_info for
SSH, terminals and CLI port forwards; ours also says when and why every kind ended, at the top level."""

from __future__ import annotations

from app.connectionlog.models import VIA_HTTP, ConnectionLog
from app.core.columns import rfc3339
from protocol.codec import JsonObject


def connection_json(row: ConnectionLog) -> JsonObject:
    ended = {"disconnect_time": rfc3339(row.disconnect_time), "disconnect_reason": row.disconnect_reason}
    body: JsonObject = {
        "id": row.id,
        "connect_time": rfc3339(row.connect_time),
        "organization": {"id": row.organization_id},
        "workspace_owner_id": row.workspace_owner_id,
        "workspace_owner_username": row.workspace_owner_username,
        "workspace_id": row.workspace_id,
        "workspace_name": row.workspace_name,
        "agent_name": row.agent_name,
        "ip": row.ip,
        "type": row.type,
        "user": None if row.user_id is None else {"id": row.user_id, "username": row.username},
        "user_agent": row.user_agent,
        **ended,
    }
    if row.via == VIA_HTTP:
        body["web_info"] = {
            "user_agent": row.user_agent,
            "user": body["user"],
            "slug_or_port": row.slug_or_port,
            "status_code": None,
        }
    else:
        body["ssh_info"] = {"connection_id": row.id, **ended, "exit_code": None, "port": row.slug_or_port or None}
    return body
