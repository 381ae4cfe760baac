"""What clients read of the public HTTP API (API.md), typed: the CLI decodes every answer it uses into these.

The server's objects carry more fields than these (API.md: "anything may be added"; unknown fields are ignored
when reading), so each class lists only what a client of ours reads. Statuses and kinds stay plain strings:
a newer server may add values, which an older CLI should show rather than refuse. Times are RFC 3339 strings,
``None`` where the server has none yet. ``tests/test_public_api_contract.py`` decodes the server's real answers
into these classes, so the two sides cannot drift apart unnoticed.
"""

from __future__ import annotations

from dataclasses import field

from protocol.codec import Message
from protocol.logs import FailureCause


class User(Message):
    id: str
    username: str
    email: str = ""
    roles: tuple[str, ...] = ()
    status: str = ""
    login_type: str = ""
    created_at: str | None = None


class WorkspaceQuota(Message):
    """Coder's: what a person's workspaces cost a day, and their budget (the sum of their groups' allowances)."""

    credits_consumed: int
    budget: int


class SessionToken(Message):
    session_token: str


class AuthMethod(Message):
    enabled: bool = False


class AuthMethods(Message):
    password: AuthMethod = AuthMethod()
    oidc: AuthMethod = AuthMethod()


class NewApiToken(Message):
    """``POST /users/me/tokens``: the only answer that carries the secret."""

    id: str
    name: str
    token: str
    expires_at: str | None = None


class ApiToken(Message):
    id: str
    name: str | None = None
    created_at: str | None = None
    expires_at: str | None = None
    last_used_at: str | None = None


class UploadedFile(Message):
    id: str


class JobMetadata(Message):
    title: str = ""


class Job(Message):
    id: str
    type: str = ""
    status: str
    file_id: str = ""
    error: str | None = None
    tags: dict[str, str] = field(default_factory=dict)
    # The organisation whose daemons run it.
    organization_id: str = ""
    created_at: str | None = None
    queue_position: int | None = None
    queue_size: int | None = None
    available_workers: int | None = None
    worker_name: str | None = None
    metadata: JobMetadata = JobMetadata()
    priority: str = "high"
    # The template's required_version, and (while pending) what no online daemon has: "needs terraform >= 1.12; …".
    required_terraform: str | None = None
    waiting_for_terraform: str = ""
    # Why it failed (the error's first line, the resource, the log line); None unless it failed.
    failure: FailureCause | None = None


class Template(Message):
    id: str
    name: str
    display_name: str = ""
    # The organisation it belongs to (its versions import and its workspaces build on that organisation's daemons).
    organization_id: str = ""
    active_version_id: str | None = None
    created_at: str | None = None


class GroupMember(Message):
    """A person as a group or an access list shows them (Coder's ReducedUser)."""

    id: str
    username: str
    email: str = ""


class Group(Message):
    id: str
    name: str
    display_name: str = ""
    organization_id: str = ""
    avatar_url: str = ""
    quota_allowance: int = 0
    # "user": people manage its members; "oidc": the identity provider does, at each sign-in.
    source: str = "user"
    total_member_count: int = 0
    members: tuple[GroupMember, ...] = ()


class Organization(Message):
    """Coder's ``codersdk.Organization``: ``name`` is the slug paths take (as does the id); ``display_name`` is the
    name itself when none was given."""

    id: str
    name: str
    display_name: str = ""
    description: str = ""
    icon: str = ""
    is_default: bool = False
    created_at: str | None = None
    updated_at: str | None = None


class SlimRole(Message):
    """A role as Coder's members lists show it; ``organization_id`` is empty for a deployment-wide role."""

    name: str
    display_name: str = ""
    organization_id: str = ""


class OrganizationMember(Message):
    """A person's membership of one organisation and their roles in it (Coder's ``OrganizationMember``)."""

    user_id: str
    organization_id: str
    roles: tuple[SlimRole, ...] = ()
    created_at: str | None = None
    updated_at: str | None = None


class OrganizationMemberWithUserData(Message):
    """A member as the members list shows them: the membership, and who the person is (Coder's shape)."""

    user_id: str
    organization_id: str
    username: str
    email: str = ""
    status: str = ""
    login_type: str = ""
    roles: tuple[SlimRole, ...] = ()
    global_roles: tuple[SlimRole, ...] = ()
    last_seen_at: str | None = None
    created_at: str | None = None
    updated_at: str | None = None


class AclUser(Message):
    id: str
    username: str
    role: str


class AclGroup(Message):
    id: str
    name: str
    display_name: str = ""
    role: str
    total_member_count: int = 0


class TemplateAcl(Message):
    """``GET /templates/{id}/acl``: Coder's key for the groups is ``group``."""

    users: tuple[AclUser, ...] = ()
    group: tuple[AclGroup, ...] = ()


class AclAvailable(Message):
    users: tuple[GroupMember, ...] = ()
    groups: tuple[Group, ...] = ()


class MinimalUser(Message):
    id: str
    username: str = ""


class TemplateVersion(Message):
    id: str
    name: str
    template_id: str | None = None
    created_at: str | None = None
    archived: bool = False
    job: Job
    message: str = ""
    # Who pushed it (None from a server that does not say).
    created_by: MinimalUser | None = None


class AgentLogSource(Message):
    id: str
    display_name: str = ""


class WorkspaceAgent(Message):
    id: str
    name: str
    os: str = ""
    arch: str = ""
    status: str = ""
    lifecycle_state: str = ""
    first_connected_at: str | None = None
    log_sources: tuple[AgentLogSource, ...] = ()


class WorkspaceResource(Message):
    id: str = ""
    name: str
    type: str
    kind: str = ""
    agents: tuple[WorkspaceAgent, ...] = ()


class WorkspaceBuild(Message):
    id: str
    build_number: int
    transition: str
    status: str = ""
    template_version_id: str = ""
    template_version_name: str = ""
    # The version's preset it was built with (None: none, or a server that does not say).
    template_version_preset_id: str | None = None
    reason: str = "initiator"
    deadline: str | None = None
    max_deadline: str | None = None
    job: Job
    # Listed with the build by this server; absent from servers that list them only on their own endpoint.
    resources: tuple[WorkspaceResource, ...] | None = None


class Workspace(Message):
    id: str
    name: str
    owner_name: str = ""
    template_name: str = ""
    status: str = ""
    latest_build: WorkspaceBuild
    outdated: bool = False
    template_active_version_id: str | None = None
    automatic_updates: str = "never"
    autostart_schedule: str | None = None
    ttl_ms: int | None = None
    next_start_at: str | None = None
    last_used_at: str | None = None
    dormant_at: str | None = None
    deleting_at: str | None = None


class BuildParameter(Message):
    name: str
    value: str


class PresetParameter(Message):
    Name: str
    Value: str = ""


class Preset(Message):
    """``GET /templateversions/{id}/presets``: Coder's codersdk.Preset, whose keys are PascalCase (no JSON tags)."""

    ID: str
    Name: str
    Parameters: tuple[PresetParameter, ...] = ()
    Default: bool = False
    Description: str = ""
    Icon: str = ""
    DesiredPrebuildInstances: int | None = None


class AgentLog(Message):
    source_id: str | None = None
    output: str = ""


class CurrentJob(Message):
    title: str = ""


class ProvisionerDaemon(Message):
    name: str
    # The organisation whose jobs it runs.
    organization_id: str = ""
    key_name: str | None = None
    status: str = ""
    tags: dict[str, str] = field(default_factory=dict)
    version: str = ""
    last_seen_at: str | None = None
    current_job: CurrentJob | None = None


class ProvisionerKey(Message):
    name: str
    tags: dict[str, str] = field(default_factory=dict)
    created_at: str | None = None


class NewProvisionerKey(Message):
    """``POST /provisionerkeys``: the only answer that carries the key."""

    name: str
    tags: dict[str, str] = field(default_factory=dict)
    key: str


class Validation(Message):
    field: str = ""
    detail: str = ""


class ErrorBody(Message):
    """Every refusal: ``{message, detail?, validations?}`` (API.md, "Errors")."""

    message: str = ""
    detail: str | None = None
    validations: tuple[Validation, ...] = ()


class UserSecret(Message):
    """A person's secret as the API lists it: never its value."""

    id: str
    name: str
    description: str = ""
    env_name: str = ""
    file_path: str = ""
    created_at: str | None = None
    updated_at: str | None = None


# -- What clients send ---------------------------------------------------------------------------------------------
# The server reads these bodies field by field (a 400 names each field that is wrong); these declare them for the
# OpenAPI document (app/apidocs/contract.py), and the suite checks every body the server accepts against them.


class LoginRequest(Message):
    """``POST /users/login``."""

    email: str
    password: str


class NewApiTokenRequest(Message):
    """``POST /users/me/tokens``: ``lifetime_seconds`` absent or null takes the deployment's default."""

    name: str
    lifetime_seconds: int | None = None


class CreateWorkspaceRequest(Message):
    """``POST /workspaces``: the template's active version unless ``template_version_id`` names another."""

    template_id: str
    name: str
    template_version_id: str | None = None
    template_version_preset_id: str | None = None
    rich_parameter_values: tuple[BuildParameter, ...] = ()
    autostart_schedule: str | None = None
    ttl_ms: int | None = None
    automatic_updates: str | None = None


class CreateBuildRequest(Message):
    """``POST /workspaces/{id}/builds``: ``transition`` is start, stop or delete."""

    transition: str
    template_version_id: str | None = None
    template_version_preset_id: str | None = None
    rich_parameter_values: tuple[BuildParameter, ...] = ()


class CreateOrganizationRequest(Message):
    """``POST /organizations``: ``display_name`` defaults to ``name``."""

    name: str
    display_name: str = ""
    description: str = ""
    icon: str = ""


class UpdateOrganizationRequest(Message):
    """``PATCH /organizations/{org}``: only the fields given change."""

    name: str | None = None
    display_name: str | None = None
    description: str | None = None
    icon: str | None = None


class UpdateMemberRolesRequest(Message):
    """``PUT /organizations/{org}/members/{user}/roles``: the member's organisation roles, all of them (an empty list
    leaves a plain member)."""

    roles: tuple[str, ...]
