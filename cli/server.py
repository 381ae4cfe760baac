"""`slipway server`: each flag is one SLIPWAY_* variable, so flags and environment are interchangeable."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, TypeVar

import click

if TYPE_CHECKING:
    from app.core.config import Settings

SERVER_FLAGS: list[tuple[str, str, str]] = [
    ("--address", "SLIPWAY_ADDRESS", "HOST:PORT to listen on. [default: 127.0.0.1:3000]"),
    (
        "--access-url",
        "SLIPWAY_ACCESS_URL",
        "The URL users and agents reach the server at. [default: http://ADDRESS]",
    ),
    (
        "--data-dir",
        "SLIPWAY_DATA_DIR",
        "Where the SQLite database, embedded Redis and keys live. [default: XDG data dir]",
    ),
    (
        "--database-url",
        "SLIPWAY_DATABASE_URL",
        "sqlite:///PATH or postgresql+psycopg://... [default: SQLite in data dir]",
    ),
    (
        "--redis-url",
        "SLIPWAY_REDIS_URL",
        "redis://, rediss:// or unix:// URL. [default: embedded redis-server]",
    ),
    (
        "--provisioner-daemons",
        "SLIPWAY_PROVISIONER_DAEMONS",
        "Built-in provisioner daemons; 0 disables. [default: 3]",
    ),
    (
        "--lifecycle-interval",
        "SLIPWAY_LIFECYCLE_INTERVAL",
        "Seconds between ticks of the lifecycle executor (autostart, autostop, dormancy, ...); 0 disables it on "
        "this replica. [default: 60]",
    ),
    (
        "--provisioner-daemon-psk",
        "SLIPWAY_PROVISIONER_DAEMON_PSK",
        "Pre-shared key external daemons may use (organization scope); also SLIPWAY_PROVISIONER_DAEMON_PSK_FILE.",
    ),
    (
        "--provisioner-redis-url",
        "SLIPWAY_PROVISIONER_REDIS_URL",
        "The Redis address handed to external daemons when they register. [default: --redis-url]",
    ),
    (
        "--provisioner-trust-redis",
        "SLIPWAY_PROVISIONER_TRUST_REDIS",
        "Daemons authenticated by these credential kinds (psk, key; repeatable) get the Redis address and their "
        "queues; all others wait for jobs over HTTP. Redis carries tunnels' bytes: trust only your own hosts.",
    ),
    (
        "--provisioner-untagged-jobs",
        "SLIPWAY_PROVISIONER_UNTAGGED_JOBS",
        "any: tagged daemons also take untagged jobs; untagged-only: only untagged daemons do. [default: any]",
    ),
    (
        "--provisioner-force-cancel-interval",
        "SLIPWAY_PROVISIONER_FORCE_CANCEL_INTERVAL",
        "How long a canceled build may take to stop before Terraform is killed. [default: 10m]",
    ),
    (
        "--provisioner-hang-timeout",
        "SLIPWAY_PROVISIONER_HANG_TIMEOUT",
        "A running job silent this long is failed by the reaper. [default: 5m]",
    ),
    (
        "--log-retention",
        "SLIPWAY_LOG_RETENTION",
        "Trim the logs of jobs finished longer ago than this (e.g. 30d) to their first 20 and last 50 lines and their "
        "errors, saying how many lines went; 0 keeps every line. [default: 0]",
    ),
    (
        "--audit-retention",
        "SLIPWAY_AUDIT_RETENTION",
        "Remove audit entries older than this (e.g. 365d), whole ranges at a time behind a checkpoint that "
        "`slipway audit verify` still verifies through; 0 keeps every entry. [default: 0]",
    ),
    (
        "--provisioner-pending-timeout",
        "SLIPWAY_PROVISIONER_PENDING_TIMEOUT",
        "A job no daemon took within this is failed by the reaper. [default: 30m]",
    ),
    (
        "--provisioner-user",
        "SLIPWAY_PROVISIONER_USER",
        "Server run as root: the unprivileged user built-in daemons run as. [default: slipway-provisioner, created]",
    ),
    (
        "--provisioner-grant-access",
        "SLIPWAY_PROVISIONER_GRANT_ACCESS",
        "Server run as root: let the provisioner user traverse (ACL u:USER:x, each printed) the directories that "
        "keep it from Slipway's interpreter and code, rather than refuse to start. [default: off]",
    ),
    (
        "--provisioner-cache-dir",
        "SLIPWAY_PROVISIONER_CACHE_DIR",
        "Built-in daemons' plugins and work dirs, outside the data dir. [default: /var/cache/slipway/provisioner-ID "
        "as root, else $XDG_CACHE_HOME/slipway/provisioner-ID]",
    ),
    (
        "--provisioner-init-cache-size",
        "SLIPWAY_PROVISIONER_INIT_CACHE_SIZE",
        "Built-in daemons keep each template's terraform init for reuse, up to this much (least recently used "
        "goes first; 0 turns it off). [default: 1GiB]",
    ),
    ("--web-workers", "SLIPWAY_WEB_WORKERS", "Web worker processes (gevent). [default: 2]"),
    (
        "--web-worker-connections",
        "SLIPWAY_WEB_WORKER_CONNECTIONS",
        "Connections each web worker serves at once. [default: 2000]",
    ),
    (
        "--max-live-connections-per-user",
        "SLIPWAY_MAX_LIVE_CONNECTIONS_PER_USER",
        "Live streams and WebSockets one person may hold at once, on all replicas; beyond it 429. [default: 100]",
    ),
    (
        "--max-live-connections-per-agent",
        "SLIPWAY_MAX_LIVE_CONNECTIONS_PER_AGENT",
        "Connections one workspace agent may hold (its control connection and tunnels). [default: 200]",
    ),
    (
        "--max-live-connections",
        "SLIPWAY_MAX_LIVE_CONNECTIONS",
        "Live streams and WebSockets of everyone together, on all replicas (agents not counted). "
        "[default: 3/4 of web workers x worker connections]",
    ),
    (
        "--stream-max-lifetime",
        "SLIPWAY_STREAM_MAX_LIFETIME",
        "A live log or status stream ends after this and the client resumes where it was. [default: 30m]",
    ),
    (
        "--drain-period",
        "SLIPWAY_DRAIN_PERIOD",
        "After SIGTERM, keep serving this long with /healthz answering 503 'draining' (so that a load balancer "
        "stops sending requests first) while live streams end with a retry hint; 15s or more ends every stream. "
        "[default: 0s]",
    ),
    (
        "--request-header-timeout",
        "SLIPWAY_REQUEST_HEADER_TIMEOUT",
        "Time a client has to send a request's line and headers; stalled connections are closed. [default: 10s]",
    ),
    (
        "--max-connections-per-client",
        "SLIPWAY_MAX_CONNECTIONS_PER_CLIENT",
        "Open connections one client address may hold in each web worker; 0 turns it off (e.g. behind a proxy "
        "that limits clients itself). [default: 1/4 of worker connections]",
    ),
    (
        "--template-storage-quota",
        "SLIPWAY_TEMPLATE_STORAGE_QUOTA",
        "Template archives each person may keep, e.g. 500MiB or 2GiB; 0 means no limit. [default: 1GiB]",
    ),
    (
        "--max-workspaces-per-person",
        "SLIPWAY_MAX_WORKSPACES_PER_PERSON",
        "Workspaces each person may have, whatever their templates; 0 means no limit. [default: 0]",
    ),
    ("--terraform-path", "SLIPWAY_TERRAFORM_PATH", "Terraform for built-in daemons. [default: PATH, else bundled]"),
    (
        "--agent-wheelhouse",
        "SLIPWAY_AGENT_WHEELHOUSE",
        "Wheels workspaces install the agent from (slipway agent-bundle). [default: PREFIX/share/slipway/agent-wheels]",
    ),
    (
        "--disable-path-apps",
        "SLIPWAY_DISABLE_PATH_APPS",
        "Refuse /@owner/workspace/apps/… (apps served on the dashboard's own origin).",
    ),
    (
        "--wildcard-access-url",
        "SLIPWAY_WILDCARD_ACCESS_URL",
        "Serve subdomain apps and port URLs on this pattern, e.g. '*.apps.example.com' or '*.localhost:3000' (a "
        "wildcard DNS record and certificate point it at this server).",
    ),
    (
        "--dangerous-allow-path-app-same-origin",
        "SLIPWAY_DANGEROUS_ALLOW_PATH_APP_SAME_ORIGIN",
        "Serve a workspace's owner its path apps unsandboxed, on the dashboard's origin, as Coder does (JupyterLab "
        'needs it; see README "Apps").',
    ),
    (
        "--secret-key",
        "SLIPWAY_SECRET_KEY",
        "Signs browser sessions (and derives the encryption key when none is given); also SLIPWAY_SECRET_KEY_FILE. "
        "[default: generated]",
    ),
    (
        "--encryption-keys",
        "SLIPWAY_ENCRYPTION_KEYS",
        "Comma-separated base64 keys (32 bytes: openssl rand -base64 32) that encrypt secrets in the database; the "
        "first encrypts, all decrypt. Also SLIPWAY_ENCRYPTION_KEYS_FILE. [default: derived from the secret key]",
    ),
    (
        "--session-duration",
        "SLIPWAY_SESSION_DURATION",
        "Lifetime of sign-in sessions, e.g. 24h. [default: 24h]",
    ),
    ("--oidc-issuer-url", "SLIPWAY_OIDC_ISSUER_URL", "OpenID Connect issuer; enables single sign-on."),
    ("--oidc-client-id", "SLIPWAY_OIDC_CLIENT_ID", "Client id registered with the identity provider."),
    ("--oidc-client-secret", "SLIPWAY_OIDC_CLIENT_SECRET", "Its client secret; also SLIPWAY_OIDC_CLIENT_SECRET_FILE."),
    ("--email-smarthost", "SLIPWAY_EMAIL_SMARTHOST", "host:port of the SMTP server notifications are sent through."),
    ("--email-from", "SLIPWAY_EMAIL_FROM", "The From address of notification emails."),
    ("--email-tls", "SLIPWAY_EMAIL_TLS", "Connect to the smarthost over TLS (SMTPS, usually port 465)."),
    ("--email-starttls", "SLIPWAY_EMAIL_STARTTLS", "Upgrade the SMTP connection with STARTTLS (usually port 587)."),
    ("--email-username", "SLIPWAY_EMAIL_USERNAME", "SMTP AUTH user name."),
    ("--email-password", "SLIPWAY_EMAIL_PASSWORD", "SMTP AUTH password; also SLIPWAY_EMAIL_PASSWORD_FILE."),
    (
        "--notifications-webhook-url",
        "SLIPWAY_NOTIFICATIONS_WEBHOOK_URL",
        "POST every notification as JSON to this http(s) URL.",
    ),
    (
        "--notifications-webhook-secret",
        "SLIPWAY_NOTIFICATIONS_WEBHOOK_SECRET",
        "Signs webhook bodies (X-Slipway-Signature: sha256=<HMAC>); also SLIPWAY_NOTIFICATIONS_WEBHOOK_SECRET_FILE.",
    ),
    ("--oidc-scopes", "SLIPWAY_OIDC_SCOPES", "Comma-separated scopes. [default: openid,profile,email]"),
    ("--oidc-email-domain", "SLIPWAY_OIDC_EMAIL_DOMAIN", "Only emails of this domain may sign in (repeatable)."),
    (
        "--oidc-allow-signups",
        "SLIPWAY_OIDC_ALLOW_SIGNUPS",
        "true/false: create accounts at first sign-in. [default: true]",
    ),
    ("--oidc-username-field", "SLIPWAY_OIDC_USERNAME_FIELD", "Claim for usernames. [default: preferred_username]"),
    ("--oidc-email-field", "SLIPWAY_OIDC_EMAIL_FIELD", "Claim for email addresses. [default: email]"),
    ("--oidc-ignore-email-verified", "SLIPWAY_OIDC_IGNORE_EMAIL_VERIFIED", "Accept emails not marked verified."),
    ("--oidc-sign-in-text", "SLIPWAY_OIDC_SIGN_IN_TEXT", "Sign-in button text. [default: OpenID Connect]"),
    ("--oidc-icon-url", "SLIPWAY_OIDC_ICON_URL", "Sign-in button icon."),
    ("--oidc-role-field", "SLIPWAY_OIDC_ROLE_FIELD", "Claim whose values map to roles at every sign-in."),
    ("--oidc-role-mapping", "SLIPWAY_OIDC_ROLE_MAPPING", "idp_value=owner|template-admin|member (repeatable)."),
    ("--disable-password-auth", "SLIPWAY_DISABLE_PASSWORD_AUTH", "Only single sign-on; no password sign-in."),
    (
        "--external-auth-config",
        "SLIPWAY_EXTERNAL_AUTH_CONFIG",
        "A YAML (or .toml) file listing Git providers under 'external_auth'; SLIPWAY_EXTERNAL_AUTH_<n>_ID, _TYPE, "
        "_CLIENT_ID, _CLIENT_SECRET … add more (see the README's Git providers).",
    ),
    (
        "--external-token-encryption-keys",
        "SLIPWAY_EXTERNAL_TOKEN_ENCRYPTION_KEYS",
        "Coder's name for --encryption-keys (one keyring encrypts Git tokens and every other secret); give one of "
        "the two.",
    ),
]
# Given several times; they reach the settings joined with commas.
REPEATABLE = {"--oidc-email-domain", "--oidc-role-mapping", "--provisioner-trust-redis"}
# Switches without a value.
SWITCHES = {
    "--oidc-ignore-email-verified",
    "--disable-password-auth",
    "--disable-path-apps",
    "--dangerous-allow-path-app-same-origin",
    "--email-tls",
    "--email-starttls",
    "--provisioner-grant-access",
}


F = TypeVar("F", bound=Callable[..., Any])


def _flag_options(function: F) -> F:
    return _options_of(flag for flag, _, _ in SERVER_FLAGS)(function)


def _options_of(flags: Iterable[str]) -> Callable[[F], F]:
    """Click options for these server flags, each with its variable."""
    wanted = set(flags)

    def decorate(function: F) -> F:
        for flag, envvar, help_text in reversed(SERVER_FLAGS):
            if flag not in wanted:
                continue
            if flag in SWITCHES:
                option = click.option(flag, is_flag=True, default=None, envvar=envvar, show_envvar=True, help=help_text)
            elif flag in REPEATABLE:
                # No envvar here: the variable is read by the settings as one comma-separated value.
                option = click.option(flag, multiple=True, help=f"{help_text}  [env var: {envvar}, comma-separated]")
            else:
                option = click.option(flag, envvar=envvar, show_envvar=True, help=help_text)
            function = option(function)
        return function

    return decorate


def _export(flags: dict[str, str | bool | tuple[str, ...] | None]) -> None:
    """Put the flags given into the environment: the settings (and every child process) read them there."""
    for flag, envvar, _ in SERVER_FLAGS:
        value = flags.get(flag.lstrip("-").replace("-", "_"))
        if isinstance(value, tuple):
            value = ",".join(value) or None
        elif isinstance(value, bool):
            value = "true" if value else None
        if value is not None:
            os.environ[envvar] = value


@click.group(invoke_without_command=True)
@_flag_options
@click.pass_context
def server(ctx: click.Context, /, **flags: str | bool | tuple[str, ...] | None) -> None:
    """Run the Slipway server: web dashboard and API, embedded Redis, and built-in provisioner daemons."""
    _export(flags)
    if ctx.invoked_subcommand is not None:
        return
    try:
        code = _run_server()
    except KeyboardInterrupt:  # Ctrl-C before the supervisor took the signals: nothing was started yet
        code = 0
    # Everything the server started has stopped by now. What would remain is the interpreter's own teardown, whose
    # garbage collection of the maintenance loops' application objects took 2.5 s on an idle machine and up to 18 s
    # on a loaded one, while a rolling restart waits for this replica to be gone: nothing is left to clean up.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _run_server() -> int:
    from app.core.config import SettingsError, load_settings
    from app.server.supervisor import StartupError, Supervisor

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return Supervisor(load_settings(), echo=click.echo).run()
    except (SettingsError, StartupError) as exc:
        click.echo(f"slipway: {exc}", err=True)
        return 2


# What the encryption commands need to reach the database and its keys; the server's other flags work too.
ENCRYPTION_FLAGS = ("--data-dir", "--database-url", "--secret-key", "--encryption-keys")


@server.group()
def encryption() -> None:
    """Secrets in the database: which keys encrypt them, and rotation onto the first key.

    Give the same database and keys as the server (flags here or before `encryption`, or SLIPWAY_* variables).
    """


@encryption.command()
@_options_of(ENCRYPTION_FLAGS)
def status(**flags: str | None) -> None:
    """List the keys and how many encrypted values each holds."""
    from app.server.encryption import print_status

    _run_encryption_command(flags, lambda settings: print_status(settings, click.echo))


@encryption.command()
@_options_of(ENCRYPTION_FLAGS)
@click.option("--batch-size", type=click.IntRange(1, 10_000), default=200, show_default=True, help="Values per commit.")
def rotate(batch_size: int, **flags: str | None) -> None:
    """Re-encrypt every secret with the first key, then revoke the keys nothing uses any more.

    Safe to interrupt and to run again; servers may keep running meanwhile.
    """
    from app.server.encryption import run_rotation

    _run_encryption_command(flags, lambda settings: run_rotation(settings, click.echo, batch_size))


def _run_encryption_command(flags: dict[str, str | None], command: Callable[[Settings], None]) -> None:
    from app.core.config import SettingsError, load_settings
    from app.server.supervisor import StartupError

    _export(dict(flags))
    try:
        command(load_settings())
    except (SettingsError, StartupError) as exc:
        click.echo(f"slipway: {exc}", err=True)
        sys.exit(1)
    except KeyboardInterrupt:
        click.echo("slipway: interrupted; what was done is kept, run the command again to carry on", err=True)
        sys.exit(130)
