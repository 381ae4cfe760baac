"""The workspace agent's protocol with the server (``/api/v2/workspaceagents/me/``, agent/README.md).

The agent fetches its :class:`Manifest`, reports start-up, lifecycle, script output, metadata and app health, and
keeps a control WebSocket on which the server sends :class:`Dial` requests for users' tunnels.
"""

from __future__ import annotations

from dataclasses import field
from typing import Annotated, Literal

from protocol.codec import Bounds, MaxLength, Message
from protocol.resources import AgentMetadata, App, Script

# The agent's token travels in this header (Coder's agents send Coder-Session-Token, which works too).
TOKEN_HEADER = "Slipway-Agent-Token"  # noqa: S105 - a header name, not a secret
TOKEN_HEADERS = (TOKEN_HEADER, "Coder-Session-Token")
API_PREFIX = "/api/v2/workspaceagents/me"

LifecycleState = Literal[
    "created", "starting", "ready", "start_timeout", "start_error",
    "shutting_down", "off", "shutdown_timeout", "shutdown_error",
]  # fmt: skip
LIFECYCLE_STATES: tuple[LifecycleState, ...] = (
    "created", "starting", "ready", "start_timeout", "start_error",
    "shutting_down", "off", "shutdown_timeout", "shutdown_error",
)  # fmt: skip
AppHealth = Literal["initializing", "healthy", "unhealthy"]
LogLevel = Literal["trace", "debug", "info", "warn", "error"]
MAX_LOG_BATCH_LINES = 1000
MAX_LOG_LINE_CHARS = 64 * 1024
DEFAULT_LOG_LIMIT_BYTES = 1024 * 1024

# Close codes of the control connection and of tunnels (agent/README.md).
CLOSE_OUTDATED = 4001  # the agent no longer belongs to the workspace's current build
CLOSE_SUPERSEDED = 4002  # a newer connection of the same agent took over
CLOSE_NEW_TOKEN = 4005  # the agent was handed a new token (:class:`NewToken`) on this connection: reconnect with it
CLOSE_ACCESS_REVOKED = 4403  # the person lost access to the workspace (a share removed) while the tunnel was open
CLOSE_DIAL_FAILED = 4502  # the agent could not reach what the user asked for
# The replica holding the connection is draining (SIGTERM, a rolling restart): connect again at once, without the
# back-off, and the proxy sends the new connection to a replica that stays.
CLOSE_SERVER_RESTARTING = 4503
SERVER_RESTARTING_REASON = "server restarting"
CLOSE_NO_ANSWER = 4504  # the agent (or the other half of a tunnel) did not answer


class Manifest(Message):
    agent_id: str = ""
    agent_name: str = ""
    workspace_id: str = ""
    workspace_name: str = ""
    owner_name: str = ""
    directory: str = ""
    environment_variables: dict[str, str] = field(default_factory=dict)
    motd_file: str = ""
    scripts: tuple[Script, ...] = ()
    metadata: tuple[AgentMetadata, ...] = ()
    apps: tuple[App, ...] = ()
    heartbeat_seconds: Annotated[int, Bounds(1, 3600)] = 15
    log_limit_bytes: int = DEFAULT_LOG_LIMIT_BYTES

    @property
    def start_scripts(self) -> tuple[Script, ...]:
        return tuple(script for script in self.scripts if script.run_on_start)

    @property
    def stop_scripts(self) -> tuple[Script, ...]:
        return tuple(script for script in self.scripts if script.run_on_stop)

    @property
    def cron_scripts(self) -> tuple[Script, ...]:
        return tuple(script for script in self.scripts if script.cron.strip())

    @property
    def checked_apps(self) -> tuple[App, ...]:
        """Apps with a healthcheck URL, which the agent probes."""
        return tuple(app for app in self.apps if app.healthcheck is not None and app.healthcheck.url)


class Startup(Message):
    version: Annotated[str, MaxLength(64)] = ""
    expanded_directory: Annotated[str, MaxLength(4096)] = ""
    subsystems: tuple[str, ...] = ()


class LifecycleReport(Message):
    state: LifecycleState
    # RFC 3339; the server's clock is used when absent.
    changed_at: str = ""


class AgentLogLine(Message):
    output: str = ""
    level: LogLevel = "info"
    log_source_id: str = ""
    created_at: str = ""


class AgentLogBatch(Message):
    logs: Annotated[tuple[AgentLogLine, ...], MaxLength(MAX_LOG_BATCH_LINES)] = ()


class AgentLogReply(Message):
    log_limit_exceeded: bool = False


class MetadataResult(Message):
    key: str
    value: str = ""
    error: str = ""
    collected_at: str = ""


class MetadataReport(Message):
    metadata: tuple[MetadataResult, ...] = ()


class AppHealthReport(Message):
    healths: dict[str, AppHealth] = field(default_factory=dict)


MAX_LISTENING_PORTS = 256


class ListeningPort(Message):
    """A TCP port something listens on in the workspace (Coder's WorkspaceAgentListeningPort)."""

    process_name: Annotated[str, MaxLength(64)] = ""
    network: Literal["tcp"] = "tcp"
    port: Annotated[int, Bounds(1, 65535)] = 1


class ListeningPortsReport(Message):
    # At most this many are kept: a workspace listening on more is one nobody reads a list of.
    ports: Annotated[tuple[ListeningPort, ...], MaxLength(MAX_LISTENING_PORTS)] = ()


DialService = Literal["tcp", "ssh", "pty"]


class Dial(Message):
    """A control message: open a tunnel to ``service`` and connect it back as ``tunnel_id``."""

    type: Literal["dial"] = "dial"
    tunnel_id: str
    service: DialService
    host: str = "127.0.0.1"
    port: Annotated[int, Bounds(0, 65535)] = 0
    rows: Annotated[int, Bounds(0, 10_000)] = 24
    cols: Annotated[int, Bounds(0, 10_000)] = 80
    command: Annotated[str, MaxLength(4096)] = ""
    # pty only: the terminal session to attach to (kept 5 minutes after its last tunnel closes), from the server:
    # an HMAC of the user, the agent and the browser's id. Empty: a terminal that ends with its tunnel.
    reconnect: Annotated[str, MaxLength(128)] = ""


class NewToken(Message):
    """A control message: from now on authenticate with ``token`` (a claimed prebuilt workspace's agent, whose old
    token stops working). The server then closes the connection with :data:`CLOSE_NEW_TOKEN`."""

    type: Literal["token"] = "token"
    token: Annotated[str, MaxLength(256)]


# The one unsigned message on an agent's control channel (Redis): the connection only looks at the database again.
CONTROL_RECHECK = b"recheck"


class TunnelControl(Message):
    """A text frame on an open tunnel (binary frames are the stream's bytes): ``eof`` half-closes, ``resize``
    changes a terminal's size, ``exit`` says how a terminal's process ended."""

    type: Literal["eof", "resize", "exit"]
    rows: Annotated[int, Bounds(0, 10_000)] = 0
    cols: Annotated[int, Bounds(0, 10_000)] = 0
    code: int = 0


EOF_MESSAGE = TunnelControl(type="eof").dumps()


class ExternalAuthReply(Message):
    """``GET /external-auth?match=<url>|id=<id>[&listen=true]``: the workspace owner's token for the Git provider
    serving that URL, or (``url`` set, no token) where they link the provider first."""

    id: str = ""
    type: str = ""
    display_name: str = ""
    access_token: str = ""
    # What git answers GIT_ASKPASS with (the username depends on the provider: x-access-token, oauth2 …).
    username: str = ""
    password: str = ""
    # The token response's other fields (scope, token_type …), for `slipway external-auth access-token --extra`.
    token_extra: dict[str, str] = field(default_factory=dict)
    url: str = ""


class GitSSHKeyReply(Message):
    """``GET /gitsshkey``: the owner's Git SSH key (OpenSSH format) for GIT_SSH_COMMAND."""

    public_key: str
    private_key: str
