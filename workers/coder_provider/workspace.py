"""Data sources describing the build: the workspace, its owner, the provisioner, external auth, tags and secrets."""

from __future__ import annotations

import json
import platform
import uuid
from typing import Any
from urllib.parse import urlsplit

from tf.types import List, Map
from tf.utils import Diagnostics

from protocol.usersecrets import SECRET_ENV_NAME, secret_env_variable, secret_file_variable
from workers.coder_provider.base import (
    BOOL,
    NUMBER,
    STRING,
    CoderDataSource,
    State,
    computed,
    env,
    is_known,
    optional,
    required,
    schema,
)
from workers.coder_provider.framework import ObjectType

TRANSITIONS = ("start", "stop", "destroy")
_ARCHITECTURES = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64", "armv7l": "arm"}


def _json_env(diags: Diagnostics, name: str, default: Any) -> Any:
    raw = env(name)
    if not raw:
        return default
    try:
        return json.loads(raw)
    except ValueError:
        diags.add_error(f"Invalid {name}", f"{name} must be JSON, got {raw[:80]!r}")
        return default


class WorkspaceDataSource(CoderDataSource):
    name = "workspace"
    schema_ = schema(
        *(computed(field) for field in ("id", "name", "transition", "access_url")),
        computed("access_port", NUMBER),
        computed("start_count", NUMBER),
        computed("is_prebuild", BOOL),
        computed("is_prebuild_claim", BOOL),
        computed("prebuild_count", NUMBER),
        *(computed(field) for field in ("template_id", "template_name", "template_version")),
        # Deprecated owner fields (now in coder_workspace_owner), still used by older templates.
        *(computed(field) for field in ("owner", "owner_id", "owner_email", "owner_name")),
        computed("owner_session_token", sensitive=True),
        computed("owner_oidc_access_token", sensitive=True),
    )

    def compute(self, diags: Diagnostics, state: State) -> State | None:
        transition = env("CODER_WORKSPACE_TRANSITION", "start")
        if transition not in TRANSITIONS:
            diags.add_error("Invalid CODER_WORKSPACE_TRANSITION", f"{transition!r} is not one of {TRANSITIONS}")
            return None
        url = urlsplit(self.provider.url)
        # A build that claims a prebuilt workspace is not a prebuild any more, whatever else says so (Coder's guard).
        is_claim = env("CODER_WORKSPACE_IS_PREBUILD_CLAIM") == "true"
        is_prebuild = env("CODER_WORKSPACE_IS_PREBUILD") == "true" and not is_claim
        state.update(
            id=env("CODER_WORKSPACE_ID") or str(uuid.uuid4()),
            name=env("CODER_WORKSPACE_NAME", "default"),
            transition=transition,
            start_count=1 if transition == "start" else 0,
            access_url=self.provider.url,
            access_port=url.port or (443 if url.scheme == "https" else 80),
            is_prebuild=is_prebuild,
            prebuild_count=1 if is_prebuild else 0,
            is_prebuild_claim=is_claim,
            template_id=env("CODER_WORKSPACE_TEMPLATE_ID"),
            template_name=env("CODER_WORKSPACE_TEMPLATE_NAME"),
            template_version=env("CODER_WORKSPACE_TEMPLATE_VERSION"),
            owner=env("CODER_WORKSPACE_OWNER", "default"),
            owner_id=env("CODER_WORKSPACE_OWNER_ID", "00000000-0000-0000-0000-000000000000"),
            owner_email=env("CODER_WORKSPACE_OWNER_EMAIL", "default@example.com"),
            owner_name=env("CODER_WORKSPACE_OWNER_NAME", "default"),
            owner_session_token=env("CODER_WORKSPACE_OWNER_SESSION_TOKEN"),
            owner_oidc_access_token=env("CODER_WORKSPACE_OWNER_OIDC_ACCESS_TOKEN"),
        )
        return state


class WorkspaceOwnerDataSource(CoderDataSource):
    name = "workspace_owner"
    schema_ = schema(
        *(computed(field) for field in ("id", "name", "full_name", "email", "ssh_public_key", "login_type")),
        computed("ssh_private_key", sensitive=True),
        computed("session_token", sensitive=True),
        computed("oidc_access_token", sensitive=True),
        computed("groups", List(STRING)),
        computed("rbac_roles", List(ObjectType({"name": STRING, "org_id": STRING}))),
    )

    def compute(self, diags: Diagnostics, state: State) -> State | None:
        groups = _json_env(diags, "CODER_WORKSPACE_OWNER_GROUPS", [])
        roles = _json_env(diags, "CODER_WORKSPACE_OWNER_RBAC_ROLES", [])
        state.update(
            id=env("CODER_WORKSPACE_OWNER_ID") or str(uuid.uuid4()),
            name=env("CODER_WORKSPACE_OWNER", "default"),
            full_name=env("CODER_WORKSPACE_OWNER_NAME", "default"),
            email=env("CODER_WORKSPACE_OWNER_EMAIL", "default@example.com"),
            ssh_public_key=env("CODER_WORKSPACE_OWNER_SSH_PUBLIC_KEY"),
            ssh_private_key=env("CODER_WORKSPACE_OWNER_SSH_PRIVATE_KEY"),
            session_token=env("CODER_WORKSPACE_OWNER_SESSION_TOKEN"),
            oidc_access_token=env("CODER_WORKSPACE_OWNER_OIDC_ACCESS_TOKEN"),
            login_type=env("CODER_WORKSPACE_OWNER_LOGIN_TYPE"),
            groups=[str(group) for group in groups],
            rbac_roles=[{"name": str(r.get("name", "")), "org_id": str(r.get("org_id", ""))} for r in roles],
        )
        return None if diags.has_errors() else state


class ProvisionerDataSource(CoderDataSource):
    """The machine Terraform runs on, in Go's GOOS/GOARCH words as Coder's provider reports them."""

    name = "provisioner"
    schema_ = schema(computed("id"), computed("os"), computed("arch"))

    def compute(self, diags: Diagnostics, state: State) -> State | None:
        machine = platform.machine().lower()
        state.update(id=str(uuid.uuid4()), os=platform.system().lower(), arch=_ARCHITECTURES.get(machine, machine))
        return state


class ExternalAuthDataSource(CoderDataSource):
    name = "external_auth"
    schema_ = schema(required("id", STRING), optional("optional", BOOL), computed("access_token", sensitive=True))

    def compute(self, diags: Diagnostics, state: State) -> State | None:
        auth_id = state["id"]
        state["access_token"] = env(f"CODER_EXTERNAL_AUTH_ACCESS_TOKEN_{auth_id}") or env(
            f"CODER_GIT_AUTH_ACCESS_TOKEN_{auth_id}"  # the variable's name before Coder renamed git auth
        )
        return state


class WorkspaceTagsDataSource(CoderDataSource):
    """Read statically from the HCL at import time; at plan time it only has to exist."""

    name = "workspace_tags"
    schema_ = schema(optional("tags", Map(STRING)), computed("id"))

    def compute(self, diags: Diagnostics, state: State) -> State | None:
        state["id"] = str(uuid.uuid4())
        return state


class SecretDataSource(CoderDataSource):
    """A user secret the workspace needs, matched by the variable (`env`) or the file (`file`) it provides.

    Its value comes from CODER_SECRET_ENV_<env> or CODER_SECRET_FILE_<hex of file>, which Coder's provisioner sets
    from the owner's stored secrets; so do Slipway's server and daemon (app/usersecrets, protocol/usersecrets.py).
    As Coder's provider does for a user without the secret, a start build (CODER_WORKSPACE_BUILD_ID set,
    transition start) fails naming the secret and the template's help_message; any other run (stop, destroy, a
    template import, a plan outside a build) reads an empty value so that a missing secret never keeps a workspace
    from stopping.
    An empty value counts as missing.
    """

    name = "secret"
    schema_ = schema(
        optional("env", STRING),
        optional("file", STRING),
        required("help_message", STRING),
        computed("value", sensitive=True),
        computed("id"),
    )

    def check_config(self, diags: Diagnostics, config: State) -> None:
        name, path = config.get("env"), config.get("file")
        if is_known(name) and name and not SECRET_ENV_NAME.match(name):
            diags.add_error(
                "Invalid coder_secret env",
                f"`env` must be a POSIX-compliant identifier matching {json.dumps(SECRET_ENV_NAME.pattern)}; "
                f"got {json.dumps(name)}",
                path=["env"],
            )
        if is_known(path) and path and not path.startswith(("/", "~/")):
            message = f"`file` must start with `/` or `~/`; got {json.dumps(path)}"
            diags.add_error("Invalid coder_secret file", message, path=["file"])

    def compute(self, diags: Diagnostics, state: State) -> State | None:
        name, path = state.get("env") or "", state.get("file") or ""
        if bool(name) == bool(path):
            diags.add_error("Invalid coder_secret", "exactly one of `env` or `file` must be set")
            return None
        if name:
            state["id"], value = f"env:{name}", env(secret_env_variable(name))
            requirement = f"environment variable {json.dumps(name)}"
        else:
            state["id"], value = f"file:{path}", env(secret_file_variable(path))
            requirement = f"file {json.dumps(path)}"
        state["value"] = value
        start_build = bool(env("CODER_WORKSPACE_BUILD_ID")) and env("CODER_WORKSPACE_TRANSITION") == "start"
        if value or not start_build:
            return state
        help_message = state.get("help_message") or ""
        detail = f"Required: {requirement}\n\n"
        if help_message:
            detail += f"Help message: {help_message}\n\n"
        detail += f"To resolve: ensure a secret exposes the {requirement}.\n"
        diags.add_error(f"Missing required secret: {requirement}", detail)
        return None
