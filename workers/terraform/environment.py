"""The environment Terraform runs with: the host's, minus our secrets, plus what the coder provider reads."""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from protocol.provider_zygote import ZYGOTE_ENV

# Variables with these prefixes configure Slipway itself (database URL, secret key, daemon credentials) or are
# Coder's; a template's local-exec can print its whole environment, so none of them may reach Terraform.
_STRIPPED_PREFIXES = ("SLIPWAY_", "CODER_")


def parameter_env_name(name: str, *, previous: bool = False) -> str:
    """CODER_PARAMETER_<sha256hex(name)>: hashed because parameter names need not be valid variable names."""
    prefix = "CODER_PARAMETER_PREVIOUS_" if previous else "CODER_PARAMETER_"
    return prefix + hashlib.sha256(name.encode("utf-8")).hexdigest()


def build_coder_env(
    *,
    access_url: str,
    transition: str,
    workspace_name: str,
    workspace_id: str,
    build_id: str,
    owner_name: str,
    owner_id: str,
    owner_email: str,
    owner_full_name: str = "",
    owner_login_type: str = "password",
    owner_groups: Sequence[str] = (),
    owner_session_token: str = "",
    template_id: str = "",
    template_name: str = "",
    template_version: str = "",
    parameters: Mapping[str, str] | None = None,
    previous_parameters: Mapping[str, str] | None = None,
    agent_scripts: Mapping[str, str] | None = None,
    external_auth_tokens: Mapping[str, str] | None = None,
    secret_env: Mapping[str, str] | None = None,
    running_agent_tokens: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The CODER_* variables the coder provider reads, as Coder's provisioner sets them for plan and apply.

    `agent_scripts` maps "<os>_<arch>" (e.g. "linux_amd64") to the agent bootstrap script.
    """
    env = {
        "CODER_AGENT_URL": access_url,
        "CODER_WORKSPACE_TRANSITION": transition,
        "CODER_WORKSPACE_NAME": workspace_name,
        "CODER_WORKSPACE_ID": workspace_id,
        "CODER_WORKSPACE_BUILD_ID": build_id,
        "CODER_WORKSPACE_OWNER": owner_name,
        "CODER_WORKSPACE_OWNER_ID": owner_id,
        "CODER_WORKSPACE_OWNER_EMAIL": owner_email,
        "CODER_WORKSPACE_OWNER_NAME": owner_full_name,
        "CODER_WORKSPACE_OWNER_LOGIN_TYPE": owner_login_type,
        "CODER_WORKSPACE_OWNER_GROUPS": json.dumps(list(owner_groups)),
        "CODER_WORKSPACE_OWNER_SESSION_TOKEN": owner_session_token,
        "CODER_WORKSPACE_TEMPLATE_ID": template_id,
        "CODER_WORKSPACE_TEMPLATE_NAME": template_name,
        "CODER_WORKSPACE_TEMPLATE_VERSION": template_version,
    }
    for name, value in (parameters or {}).items():
        env[parameter_env_name(name)] = value
    for name, value in (previous_parameters or {}).items():
        env[parameter_env_name(name, previous=True)] = value
    for platform, script in (agent_scripts or {}).items():
        env[f"CODER_AGENT_SCRIPT_{platform}"] = script
    # data.coder_external_auth.<x>.access_token: the workspace owner's token for each Git provider it declares.
    for provider_id, token in (external_auth_tokens or {}).items():
        env[f"CODER_EXTERNAL_AUTH_ACCESS_TOKEN_{provider_id}"] = token
    # data.coder_secret: the owner's secrets, already named as the provider reads them (protocol/usersecrets.py).
    env.update(secret_env or {})
    # A claim of a prebuilt workspace (Coder's variables): each running agent, by the sha256 of its id, takes a new
    # token in place, so the workspace keeps running while its agent switches to the token only it was handed.
    if running_agent_tokens:
        env["CODER_WORKSPACE_IS_PREBUILD_CLAIM"] = "true"
    for agent_id, token in (running_agent_tokens or {}).items():
        env[f"CODER_RUNNING_WORKSPACE_AGENT_TOKEN_{hashlib.sha256(agent_id.encode()).hexdigest()}"] = token
    return env


def agent_python_env() -> dict[str, str]:
    """``SLIPWAY_AGENT_PYTHON``: this daemon's interpreter, when it can run ``python -m agent``.

    A workspace that is a process on the daemon's own machine (examples/local) then starts the agent with it at
    once instead of downloading the agent bundle.
    """
    return {"SLIPWAY_AGENT_PYTHON": sys.executable} if _agent_importable() and sys.executable else {}


@functools.cache
def _agent_importable() -> bool:
    # agent.__main__ rather than agent: a checkout's agent/ folder without code imports as an empty namespace package.
    try:
        return importlib.util.find_spec("agent.__main__") is not None
    except (ImportError, ValueError):
        return False


def terraform_environment(
    host_env: Mapping[str, str],
    extra: Mapping[str, str],
    *,
    plugin_cache: Path,
    cli_config_file: Path | None = None,
    provider_zygote: Path | None = None,
) -> dict[str, str]:
    """The environment for every Terraform command of a job.

    The host environment without SLIPWAY_* and CODER_* variables, then SLIPWAY_AGENT_PYTHON when this interpreter
    has the agent, then `extra` (normally `build_coder_env(...)`), then the Terraform settings. Creates the plugin
    cache directory. `provider_zygote`: the socket of the daemon's warm coder provider (workers/provider_zygote.py),
    which the plugin launcher asks for a provider instead of starting one.
    """
    env = {key: value for key, value in host_env.items() if not key.upper().startswith(_STRIPPED_PREFIXES)}
    env.update(agent_python_env())
    env.update(extra)
    plugin_cache.mkdir(mode=0o700, parents=True, exist_ok=True)
    env["TF_PLUGIN_CACHE_DIR"] = str(plugin_cache)
    env["TF_IN_AUTOMATION"] = "1"
    # Daemons often run offline; Terraform's version-check call home would only add a timeout.
    env["CHECKPOINT_DISABLE"] = "1"
    if cli_config_file is not None:
        env["TF_CLI_CONFIG_FILE"] = str(cli_config_file)
    if provider_zygote is not None:
        env[ZYGOTE_ENV] = str(provider_zygote)
    return env
