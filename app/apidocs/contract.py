"""What the OpenAPI document cannot read from a route itself: which typed message a call answers with, with what
status, and which credential the blueprints outside :func:`app.auth.blueprints.api_blueprint` take.

Request bodies need no entry here when the view reads them with ``message_body(X)`` (app/apidocs/document.py finds
the call in the view's source). A route listed nowhere is documented as untyped (any JSON on success), which is the
truth until someone types it: add it here when you give it a message, and the suite checks every answer it gets.
"""

from __future__ import annotations

from dataclasses import dataclass

from protocol import agentapi, logs, provisionerd
from protocol import publicapi as api
from protocol.codec import Message


@dataclass(frozen=True)
class Reply:
    """A call's successful answer: ``message`` (``None``: no body, as 204s), a JSON array of them when ``many``."""

    status: int
    message: type[Message] | None
    many: bool = False


def one(message: type[Message], status: int = 200) -> Reply:
    return Reply(status, message)


def many(message: type[Message]) -> Reply:
    return Reply(200, message, many=True)


NO_CONTENT = Reply(204, None)

REPLIES: dict[str, Reply] = {
    # Accounts and tokens.
    "users_api.create_first_user": one(api.User, 201),
    "users_api.login": one(api.SessionToken, 201),
    "users_api.logout": NO_CONTENT,
    "auth_api.auth_methods": one(api.AuthMethods),
    "users_api.me": one(api.User),
    "users_api.list_users": many(api.User),
    "users_api.create_user": one(api.User, 201),
    "users_api.get_user": one(api.User),
    "users_api.update_user": one(api.User),
    "users_api.create_token": one(api.NewApiToken, 201),
    "users_api.list_tokens": many(api.ApiToken),
    "users_api.delete_token": NO_CONTENT,
    "users_api.revoke_invitation": NO_CONTENT,
    "usersecrets_api.list_secrets": many(api.UserSecret),
    "usersecrets_api.create_secret": one(api.UserSecret, 201),
    "usersecrets_api.get_secret": one(api.UserSecret),
    "usersecrets_api.update_secret": one(api.UserSecret),
    "usersecrets_api.delete_secret": NO_CONTENT,
    # Organisations, groups and template access.
    "groups_api.list_groups": many(api.Group),
    "groups_api.create_group": one(api.Group, 201),
    "groups_api.group_by_name": one(api.Group),
    "groups_api.get_group": one(api.Group),
    "groups_api.update_group": one(api.Group),
    "organizations_api.list_organizations": many(api.Organization),
    "organizations_api.create_organization": one(api.Organization, 201),
    "organizations_api.get_organization": one(api.Organization),
    "organizations_api.update_organization": one(api.Organization),
    "organizations_api.list_members": many(api.OrganizationMemberWithUserData),
    "organizations_api.add_member": one(api.OrganizationMember, 201),
    "organizations_api.remove_member": NO_CONTENT,
    "organizations_api.update_member_roles": one(api.OrganizationMember),
    "template_acl_api.get_acl": one(api.TemplateAcl),
    "template_acl_api.update_acl": one(api.TemplateAcl),
    "template_acl_api.available": one(api.AclAvailable),
    # Templates and their versions.
    "catalog_api.upload_file": one(api.UploadedFile, 201),
    "catalog_api.create_version": one(api.TemplateVersion, 201),
    "catalog_api.create_organization_version": one(api.TemplateVersion, 201),
    "catalog_api.get_version": one(api.TemplateVersion),
    "catalog_api.list_versions": many(api.TemplateVersion),
    "catalog_api.version_by_name": one(api.TemplateVersion),
    "catalog_api.version_presets": many(api.Preset),
    "catalog_api.version_resources": many(api.WorkspaceResource),
    "catalog_api.version_logs": many(logs.JobLog),
    "catalog_api.create_template": one(api.Template, 201),
    "catalog_api.create_organization_template": one(api.Template, 201),
    "catalog_api.list_templates": many(api.Template),
    "catalog_api.get_template": one(api.Template),
    "catalog_api.template_by_name": one(api.Template),
    "catalog_api.delete_template": NO_CONTENT,
    "lifecycle_api.update_template": one(api.Template),
    # Workspaces and builds.
    "workspaces_api.create_workspace": one(api.Workspace, 201),
    "workspaces_api.list_workspaces": many(api.Workspace),
    "workspaces_api.get_workspace": one(api.Workspace),
    "workspaces_api.workspace_quota": one(api.WorkspaceQuota),
    "workspaces_api.list_builds": many(api.WorkspaceBuild),
    "workspaces_api.create_build": one(api.WorkspaceBuild, 201),
    "workspaces_api.get_build": one(api.WorkspaceBuild),
    "workspaces_api.confirm_build": one(api.WorkspaceBuild),
    "workspaces_api.cancel_build": one(api.WorkspaceBuild),
    "workspaces_api.build_resources": many(api.WorkspaceResource),
    "workspaces_api.build_parameters": many(api.BuildParameter),
    "workspaces_api.build_logs": many(logs.JobLog),
    "lifecycle_api.set_autostart": NO_CONTENT,
    "lifecycle_api.set_ttl": NO_CONTENT,
    "lifecycle_api.set_automatic_updates": NO_CONTENT,
    "lifecycle_api.set_dormant": one(api.Workspace),
    "agents_api.agent_logs": many(api.AgentLog),
    "agents_api.unshare_port": NO_CONTENT,
    # Provisioners, as people see them.
    "provisioners_api.list_daemons": many(api.ProvisionerDaemon),
    "provisioners_api.list_jobs": many(api.Job),
    "provisioners_api.get_job": one(api.Job),
    "provisioners_api.cancel": one(api.Job),
    "provisioners_api.create_key": one(api.NewProvisionerKey, 201),
    "provisioners_api.list_keys": many(api.ProvisionerKey),
    "provisioners_api.delete_key": NO_CONTENT,
    # The provisioner daemon's protocol (protocol/provisionerd.py).
    "provisionerd_api.register": one(provisionerd.Registered, 201),
    "provisionerd_api.acquire": one(provisionerd.AcquiredJob),
    "provisionerd_api.logs": one(provisionerd.LogBatchReply),
    "provisionerd_api.complete": NO_CONTENT,
    "provisionerd_api.fail": NO_CONTENT,
    # The agent's (protocol/agentapi.py).
    "agent_api.manifest": one(agentapi.Manifest),
    "agent_api.startup": NO_CONTENT,
    "agent_api.lifecycle": NO_CONTENT,
    "agent_api.script_timings": NO_CONTENT,
    "agent_api.logs": one(agentapi.AgentLogReply),
    "agent_api.metadata": NO_CONTENT,
    "agent_api.app_health": NO_CONTENT,
    "agent_api.listening_ports": NO_CONTENT,
    "agent_api.external_auth": one(agentapi.ExternalAuthReply),
    "agent_api.git_ssh_key": one(agentapi.GitSSHKeyReply),
}

# Request bodies the view reads by hand (not with ``message_body``), typed here.
REQUESTS: dict[str, type[Message]] = {
    "users_api.login": api.LoginRequest,
    "users_api.create_token": api.NewApiTokenRequest,
    "workspaces_api.create_workspace": api.CreateWorkspaceRequest,
    "workspaces_api.create_build": api.CreateBuildRequest,
}

# Calls whose success has a body other than JSON, by endpoint: content type and what it is.
OTHER_CONTENT: dict[str, tuple[str, str]] = {
    "catalog_api.download_file": ("application/x-tar", "The template archive as uploaded (tar or zip)."),
    "agent_bootstrap.init_script": ("text/plain", "The script that fetches and starts the agent."),
    "audit_api.export": ("application/x-ndjson", "The audit log, one JSON entry a line."),
}
# Calls that also answer as a Server-Sent Events stream (``?follow=true``; README's "Logs").
STREAMS = {"catalog_api.version_logs", "workspaces_api.build_logs", "agents_api.agent_logs"}
# Raw request bodies (not JSON), by endpoint.
RAW_BODIES: dict[str, tuple[str, ...]] = {"catalog_api.upload_file": ("application/x-tar", "application/zip")}

# The credentials a call may present, as securitySchemes names (document.py declares them).
USER_TOKEN = ("BearerToken", "SessionTokenHeader")
# Blueprints under /api/v2 that are not token blueprints, by name: the credentials each takes (none: public).
OTHER_BLUEPRINTS: dict[str, tuple[str, ...]] = {
    "agent_api": ("AgentToken",),
    "provisionerd_api": ("ProvisionerPSK", "ProvisionerKey", *USER_TOKEN),
    # The identity provider's redirect back: its state and the browser's cookie are the credential.
    "oidc": (),
    # What a workspace fetches before its agent has any credential.
    "agent_bootstrap": (),
    # An app host's sign-in hop: the dashboard's session cookie.
    "applications": ("SessionCookie",),
}
# Public endpoints of token blueprints that check a credential of their own.
OWN_CREDENTIALS: dict[str, tuple[str, ...]] = {
    # A token, or the dashboard's cookie from a page of this site (a WebSocket is not same-origin bound).
    "agents_api.tunnel": (*USER_TOKEN, "SessionCookie"),
    # The server's own short-lived signature in the query: only its health check opens it.
    "debug_api.websocket_echo": (),
}
