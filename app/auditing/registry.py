"""Every model, audited or exempt on purpose: tests/test_audit.py fails when a model is neither, so a new table
cannot be written to without someone deciding whether its changes belong in the audit log."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from app.agents.models import AgentConnectionEvent, AgentLog, AgentScriptTiming, WorkspacePortShare
from app.appearance.models import Appearance
from app.audit.models import AuditChainHead, AuditLog
from app.audit.recorder import AuditSpec, exempt, register
from app.catalog.models import Template, TemplateAcl, TemplateVersion
from app.connectionlog.models import ConnectionLog
from app.core.encryption_keys import EncryptionKeyRecord
from app.core.schema_release import SchemaRelease
from app.externalauth.models import ExternalAuthLink, GitSSHKey
from app.files.models import File, FileUpload
from app.groups.models import Group, GroupMember
from app.insights.models import (
    TemplateAppDaily,
    TemplateAppMonthly,
    TemplateUsageDaily,
    TemplateUserDaily,
    TemplateUserMonthly,
)
from app.lifecycle.models import LifecycleTick
from app.notifications.models import Notification, NotificationDelivery, NotificationPreference
from app.organizations.models import Organization, OrganizationMember
from app.prebuilds.models import PrebuildsSettings
from app.provisioning.models import (
    ProvisionerDaemon,
    ProvisionerJob,
    ProvisionerJobLog,
    ProvisionerJobTiming,
    ProvisionerKey,
)
from app.resources.models import AgentLogSource, WorkspaceAgent, WorkspaceResource
from app.users.models import ApiKey, BrowserSession, PasswordReset, User, UserInvitation
from app.usersecrets.models import UserSecret
from app.workspaces.models import Workspace, WorkspaceAcl, WorkspaceBuild

# Timestamps that move by themselves are no change anyone made.
BOOKKEEPING = frozenset({"updated_at", "last_used_at", "last_seen_at"})


def _build_action(values: Mapping[str, Any]) -> str:
    """Coder's verbs for a build: start, stop or delete."""
    return str(values.get("transition") or "create")


def _spec(
    resource_type: str, name_field: str | None = None, *, ignored: frozenset[str] = frozenset(), **more: Any
) -> AuditSpec:
    return AuditSpec(resource_type, name_field, ignored_fields=BOOKKEEPING | ignored, **more)


def register_models() -> None:
    register(User, _spec("user", "username"))
    register(ApiKey, _spec("api_key", "name"))
    register(UserInvitation, _spec("user_invitation", "email"))
    register(Template, _spec("template", "name"))
    register(PrebuildsSettings, _spec("prebuilds_settings"))
    register(TemplateVersion, _spec("template_version", "name"))
    register(TemplateAcl, _spec("template_acl"))
    register(Workspace, _spec("workspace", "name", ignored=frozenset({"next_start_at", "latest_build_id"})))
    # A build's state, saved plan and plan review are what its job produced, not a change anyone made.
    register(
        WorkspaceBuild,
        _spec(
            "workspace_build", "build_number", ignored=frozenset({"state", "saved_plan", "plan_review"}),
            create_action=_build_action, build_reason_field="reason",
        ),
    )  # fmt: skip
    register(WorkspaceAcl, _spec("workspace_acl"))
    register(WorkspacePortShare, _spec("port_share", "agent_name"))
    register(Group, _spec("group", "name"))
    register(GroupMember, _spec("group_member"))
    register(Organization, _spec("organization", "name"))
    register(OrganizationMember, _spec("organization_member"))
    register(ProvisionerKey, _spec("provisioner_key", "name"))
    register(UserSecret, _spec("user_secret", "name", secret_fields=frozenset({"value"})))
    register(GitSSHKey, _spec("git_ssh_key"))
    register(
        ExternalAuthLink,
        _spec("external_auth_link", "provider_id", ignored=frozenset({"validated_at", "validate_error"})),
    )
    register(NotificationPreference, _spec("notification_preference", "event"))
    register(Appearance, _spec("appearance"))
    # Keys added or revoked by `slipway server` (the digest is of the key, and is marked secret all the same).
    register(EncryptionKeyRecord, _spec("encryption_key", "key_id", secret_fields=frozenset({"digest"})))

    sign_in = "sign-in and sign-out are recorded explicitly (app/auth)"
    exempt(BrowserSession, sign_in)
    exempt(SchemaRelease, "written by the server itself when it migrates, never by a person or a client")
    exempt(PasswordReset, "a 'forgot password' link anyone may ask for; using it changes the user, which is audited")
    exempt(ProvisionerDaemon, "a registration is recorded explicitly, with the key or PSK it used")
    for output in (ProvisionerJob, ProvisionerJobLog, ProvisionerJobTiming, WorkspaceResource, WorkspaceAgent,
                   AgentLogSource, AgentLog, AgentConnectionEvent, AgentScriptTiming):  # fmt: skip
        exempt(output, "what a build or an agent reports; the build or version that caused it is audited")
    exempt(Notification, "a message to a person, not a setting")
    exempt(NotificationDelivery, "a message's delivery attempts")
    exempt(File, "a template archive's bytes; the version pushed with it is audited")
    exempt(FileUpload, "an upload in progress; the version pushed with it is audited")
    exempt(LifecycleTick, "the lifecycle executor's own bookkeeping")
    exempt(AuditLog, "the audit log itself")
    exempt(AuditChainHead, "the audit chain's head")
    exempt(ConnectionLog, "the connection log, a record of its own kept as long as the audit log")
    exempt(TemplateUsageDaily, "a rollup the insights job recomputes from builds and connections")
    exempt(TemplateUserDaily, "a rollup the insights job recomputes from connections")
    exempt(TemplateAppDaily, "a rollup the insights job recomputes from connections")
    exempt(TemplateUserMonthly, "a rollup the insights job recomputes from the daily person rows")
    exempt(TemplateAppMonthly, "a rollup the insights job recomputes from the daily app rows")
