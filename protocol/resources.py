"""What a template's plan or a build's state contains, in Coder's terms: resources, their agents, and what hangs
off an agent (apps, scripts, environment, metadata).

The daemon reads these from Terraform (``workers/resources.py``), the server stores them (an agent's definition is
kept as its JSON) and builds each agent's manifest from them (``protocol/agentapi.py``). Field names are the
``coder`` provider's attribute names, and each default is Coder's default for that attribute.
"""

from __future__ import annotations

from dataclasses import field
from typing import Annotated, Literal

from protocol.codec import Bounds, Message

Lifecycle = Literal["persistent", "ephemeral"]
ResourceKind = Literal["computational", "peripheral"]
ShareLevel = Literal["owner", "authenticated", "public"]
SHARE_LEVELS: tuple[ShareLevel, ...] = ("owner", "authenticated", "public")  # narrowest first
# Agent connection timeouts, script timeouts, intervals: seconds that fit every store (and a human lifetime).
Seconds = Annotated[int, Bounds(0, 10 * 365 * 86400)]


class MetadataItem(Message):
    """One ``item`` of a ``coder_metadata`` resource."""

    key: str = ""
    value: str = ""
    sensitive: bool = False


class AgentMetadata(Message):
    """One ``metadata`` block of a ``coder_agent``: a script the agent runs every ``interval`` seconds."""

    key: str = ""
    display_name: str = ""
    script: str = ""
    interval: Seconds = 0
    timeout: Seconds = 0
    order: int = 0


class DisplayApps(Message):
    # Coder's defaults when the block is absent or a field is unset: everything but VS Code Insiders.
    vscode: bool = True
    vscode_insiders: bool = False
    web_terminal: bool = True
    ssh_helper: bool = True
    port_forwarding_helper: bool = True


class Healthcheck(Message):
    url: str = ""
    interval: Seconds = 5
    threshold: Annotated[int, Bounds(0, 10_000)] = 3


class App(Message):
    id: str = ""
    slug: str = ""
    display_name: str = ""
    url: str = ""
    command: str = ""
    icon: str = ""
    share: ShareLevel = "owner"
    subdomain: bool = False
    external: bool = False
    hidden: bool = False
    open_in: str = "slim-window"
    order: int = 0
    group: str = ""
    healthcheck: Healthcheck | None = None
    # The app a `coder_ai_task` shows its task in (its `app_id`, or the older `sidebar_app`).
    ai_task: bool = False

    @property
    def name(self) -> str:
        return self.display_name or self.slug


class Script(Message):
    id: str = ""
    display_name: str = ""
    script: str = ""
    icon: str = ""
    cron: str = ""
    log_path: str = ""
    start_blocks_login: bool = False
    run_on_start: bool = False
    run_on_stop: bool = False
    timeout: Seconds = 0
    # Given by the server when it stores the agent: where the script's output goes (one log source per script).
    log_source_id: str = ""

    @property
    def name(self) -> str:
        return self.display_name or self.log_source_id


class Env(Message):
    name: str = ""
    value: str = ""
    merge_strategy: Literal["replace", "append", "prepend", "error"] = "replace"


class Devcontainer(Message):
    """A Dev Container the agent starts in the workspace (``coder_devcontainer``)."""

    id: str = ""
    workspace_folder: str = ""
    config_path: str = ""


class Agent(Message):
    name: str = ""
    id: str = ""
    # The secret the agent authenticates with; the server keeps only its hash and never shows it.
    token: str = ""
    os: str = ""
    arch: str = ""
    auth: str = "token"
    dir: str = ""
    env: dict[str, str] = field(default_factory=dict)
    startup_script: str = ""
    startup_script_behavior: str = "non-blocking"
    shutdown_script: str = ""
    connection_timeout: Seconds = 120
    troubleshooting_url: str = ""
    motd_file: str = ""
    order: int = 0
    metadata: tuple[AgentMetadata, ...] = ()
    display_apps: DisplayApps = DisplayApps()
    apps: tuple[App, ...] = ()
    scripts: tuple[Script, ...] = ()
    envs: tuple[Env, ...] = ()
    devcontainers: tuple[Devcontainer, ...] = ()

    def app(self, slug: str) -> App | None:
        """The app with this slug (slugs are unique per agent, ignoring case)."""
        return next((app for app in self.apps if app.slug.lower() == slug.lower()), None)


class Resource(Message):
    name: str
    type: str
    address: str = ""
    # The count index or for_each key of this instance, as text ("0", "eu"); None for a single instance.
    index_key: str | None = None
    module_path: str = ""
    kind: ResourceKind = "peripheral"
    agents: tuple[Agent, ...] = ()
    metadata: tuple[MetadataItem, ...] = ()
    hide: bool = False
    icon: str = ""
    daily_cost: Annotated[int, Bounds(0, 2**31 - 1)] = 0
    instance_type: str = ""
    # Known for an import's start plan only: does stopping the workspace keep it (a home volume) or remove it?
    lifecycle: Lifecycle | None = None


class SecretRequirement(Message):
    """A ``data "coder_secret"`` the template declares: the variable (``env``) or file (``file``) it reads. Builds
    get only the owner's secrets their version declares (app/usersecrets/services.py build_secret_env)."""

    env: str = ""
    file: str = ""


class ExternalAuth(Message):
    """A ``data "coder_external_auth"`` the template needs (a Git provider the person must have linked)."""

    id: str = ""
    optional: bool = False
