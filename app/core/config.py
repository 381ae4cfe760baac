"""Every server setting, parsed once from ``SLIPWAY_*`` environment variables.

Each ``slipway server`` flag maps to exactly one variable here, so a deployment can be described entirely by
its environment. Parsing fails fast with a one-line :class:`SettingsError` naming the variable and what was
wrong with it; nothing downstream has to second-guess a value.
"""

from __future__ import annotations

import os
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from urllib.parse import urlsplit

from app.core.external_auth_config import ExternalAuthConfigError, ExternalAuthProvider, load_external_auth
from protocol.agent_bundle import default_agent_wheelhouse
from protocol.values import parse_duration, parse_int, parse_size

PREFIX = "SLIPWAY_"
SUPPORTED_DATABASES = ("sqlite", "postgresql")
# Daemons authenticated by one of these may be trusted with Redis; user tokens never are.
TRUSTABLE_DAEMON_CREDENTIALS = ("psk", "key")


class SettingsError(ValueError):
    """A setting is missing or malformed; the message is meant to be shown to the operator as is."""


@dataclass(frozen=True)
class Settings:
    address: str = "127.0.0.1:3000"
    access_url: str = "http://127.0.0.1:3000"
    data_dir: Path = field(default_factory=lambda: default_data_dir({}))
    database_url: str = ""
    redis_url: str = ""
    # True when SLIPWAY_REDIS_URL was not given: `slipway server` then runs redis-server itself.
    embedded_redis: bool = True
    provisioner_daemons: int = 3
    # Seconds between lifecycle executor ticks (app/lifecycle/executor.py); 0 = this replica runs none.
    lifecycle_interval: int = 60
    # Seconds between prebuilds reconciler ticks (app/prebuilds/reconciler.py); 0 = this replica runs none.
    prebuilds_interval: int = 15
    # At most this many prebuild builds (creates and deletes) of one template at once.
    prebuilds_max_in_flight: int = 3
    # Seconds between writes of workspaces' last use (app/lifecycle/activity.py): at most one per workspace.
    activity_flush_interval: int = 60
    web_workers: int = 2
    # Connection slots of each web worker (gunicorn --worker-connections): the ceiling every limit below protects.
    web_worker_connections: int = 2000
    # Live connections (SSE streams, WebSockets, proxied app requests) a person may hold at once, on all replicas.
    max_live_connections_per_user: int = 100
    # An agent's own budget (its control connection and its halves of tunnels): people's tabs never count here.
    max_live_connections_per_agent: int = 200
    # People's live connections on all replicas together; agents are not counted (they have their own budget).
    max_live_connections: int = 3000
    # A stream ends after this long (with a retry hint); the client resumes where it was (Last-Event-ID).
    stream_max_lifetime: int = 1800
    # Seconds a replica keeps serving after SIGTERM with /healthz answering 503 "draining", so that a load balancer
    # stops sending it requests before it stops (app/server/supervisor.py); 0 stops at once.
    drain_period: int = 0
    # Time a client has to send a request line and headers; a connection that stalls mid-head is closed (408).
    request_header_timeout: int = 10
    # Open connections one client address may hold in each web worker; 0 turns the limit off.
    max_connections_per_client: int = 500
    secret_key: str = ""
    # Keys that encrypt secrets in the database (base64, 32 bytes): the first encrypts, all decrypt. Empty: a key
    # derived from the secret key (app/core/crypto.py).
    encryption_keys: tuple[bytes, ...] = field(default=(), repr=False)
    session_duration: int = 24 * 3600
    default_token_lifetime: int = 30 * 86400
    max_token_lifetime: int = 365 * 86400
    login_failure_limit: int = 10
    login_failure_window: int = 300
    # Handed by `slipway server` to the daemons it starts itself; never configured by hand.
    builtin_daemon_psk: str = ""
    provisioner_daemon_psk: str = ""
    # The Redis address handed to external daemons when they register; empty means redis_url.
    provisioner_redis_url: str = ""
    # Credential kinds ("psk", "key") whose daemons are trusted with Redis; the others wait for jobs over HTTP.
    provisioner_trust_redis: tuple[str, ...] = ()
    provisioner_untagged_jobs: str = "any"
    provisioner_hang_timeout: int = 300
    # Finished jobs' logs older than this are trimmed to their first and last lines and their errors; 0 keeps
    # every line for ever.
    log_retention: int = 0
    # Audit entries older than this are removed (whole ranges, behind a checkpoint the chain still verifies
    # through); 0 keeps every entry for ever.
    audit_retention: int = 0
    provisioner_pending_timeout: int = 1800
    provisioner_force_cancel_interval: int = 600
    # How often an idle daemon calls in; it is offline after 90 s of silence (hidden, for tests).
    provisioner_heartbeat_interval: int = 10
    terraform_path: str = ""
    # Built-in daemons of a server run as root run as this unprivileged user ("": slipway-provisioner, created).
    provisioner_user: str = ""
    # Server run as root: let that user traverse (ACL u:user:x) the directories between it and Slipway's
    # interpreter and code, instead of refusing to start (`make run` asks for it).
    provisioner_grant_access: bool = False
    # Where built-in daemons keep plugins and work dirs; outside the data dir, which they must not reach.
    # None: /var/cache/slipway/provisioner-<id> as root, else $XDG_CACHE_HOME/slipway/provisioner-<id>.
    provisioner_cache_dir: Path | None = None
    # The cap of the built-in daemons' prepared-init cache (workers/terraform/init_cache.py); 0 turns it off.
    provisioner_init_cache_size: int = 1024**3
    # Files secrets were read from (SLIPWAY_*_FILE): kept out of the built-in daemons' reach like the data dir.
    secret_files: tuple[Path, ...] = ()
    # The wheels of the agent's dependencies that workspaces install offline (`slipway agent-bundle` fills it).
    agent_wheelhouse: Path = field(default_factory=lambda: default_agent_wheelhouse())
    # How often the server pings each agent's control connection and records it as connected (hidden, for tests).
    agent_heartbeat_interval: int = 15
    # Path-based apps (/@owner/workspace.agent/apps/slug/) share the dashboard's origin; some operators refuse that.
    disable_path_apps: bool = False
    # Subdomain apps and port URLs live under this pattern (``*.apps.example.com``, ``*.localhost:3000``): each app
    # gets an origin of its own (app/agents/hosts.py). Empty: subdomain apps are unavailable.
    wildcard_access_url: str = ""
    # The workspace's owner gets its path apps without the sandbox, on the dashboard's own origin, as in Coder: what
    # apps such as JupyterLab need (cookies read by script, storage, same-origin requests), at the cost that
    # whatever answers on the app's port runs script as its owner on the dashboard (app/agents/proxy.py SANDBOX).
    dangerous_allow_path_app_same_origin: bool = False
    # Bytes of template archives each person may keep (their uploads and their versions' archives); 0: no limit.
    template_storage_quota: int = 1024**3
    # Workspaces each person may have (not deleted), whatever their templates; 0: no limit (app/workspaces/limits.py).
    max_workspaces_per_person: int = 0
    # A new template's access list starts with Everyone→use (anyone in its organisation may use it); false: it
    # starts empty, and only its admins, owners and template admins see it until someone is granted access.
    new_templates_for_everyone: bool = True
    # Notifications by email (SMTP, enabled by a smarthost) and by webhook (app/notifications/delivery.py).
    email_smarthost: str = ""
    email_from: str = ""
    email_tls: bool = False
    email_starttls: bool = False
    email_username: str = ""
    email_password: str = ""
    notifications_webhook_url: str = ""
    notifications_webhook_secret: str = ""
    # Single sign-on (OpenID Connect); enabled when an issuer and a client id are set.
    oidc_issuer_url: str = ""
    oidc_client_id: str = ""
    oidc_client_secret: str = ""
    oidc_scopes: tuple[str, ...] = ("openid", "profile", "email")
    # Empty: any email domain may sign in.
    oidc_email_domains: tuple[str, ...] = ()
    oidc_allow_signups: bool = True
    # Git providers people link their accounts with (app/core/external_auth_config.py).
    external_auth: tuple[ExternalAuthProvider, ...] = ()
    oidc_username_field: str = "preferred_username"
    oidc_email_field: str = "email"
    oidc_ignore_email_verified: bool = False
    oidc_sign_in_text: str = "OpenID Connect"
    oidc_icon_url: str = ""
    oidc_role_field: str = ""
    # (identity provider value, Slipway role) pairs; roles follow the claim at every sign-in when set.
    oidc_role_mapping: tuple[tuple[str, str], ...] = ()
    disable_password_auth: bool = False

    @property
    def oidc_enabled(self) -> bool:
        return bool(self.oidc_issuer_url and self.oidc_client_id)

    @property
    def host(self) -> str:
        return split_address(self.address)[0]

    @property
    def port(self) -> int:
        return split_address(self.address)[1]

    @property
    def advertised_redis_url(self) -> str:
        return self.provisioner_redis_url or self.redis_url

    @property
    def embedded_redis_socket(self) -> Path:
        return self.data_dir / "redis.sock"


def default_data_dir(environ: Mapping[str, str]) -> Path:
    xdg = environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(xdg) / "slipway"


def load_settings(environ: Mapping[str, str] | None = None) -> Settings:
    """Build :class:`Settings` from the environment, raising :class:`SettingsError` on the first bad value."""
    env = os.environ if environ is None else environ
    address = _get(env, "ADDRESS") or "127.0.0.1:3000"
    split_address(address)
    data_dir = Path(_get(env, "DATA_DIR") or default_data_dir(env)).expanduser()
    access_url = _parse_access_url(_get(env, "ACCESS_URL") or f"http://{address}")
    raw_database_url = _get(env, "DATABASE_URL")
    # The default is ours and needs no check: SQLAlchemy parses it when it opens the database, and not importing
    # it here lets `slipway server` start its web server sooner (app/server/web.py).
    database_url = _parse_database_url(raw_database_url) if raw_database_url else f"sqlite:///{data_dir / 'slipway.db'}"
    redis_url = _redis_url(env, "REDIS_URL")
    web_workers = _int(env, "WEB_WORKERS", 2, minimum=1, maximum=64)
    worker_connections = _int(env, "WEB_WORKER_CONNECTIONS", 2000, minimum=10, maximum=100_000)
    settings = Settings(
        address=address,
        access_url=access_url,
        data_dir=data_dir,
        database_url=database_url,
        redis_url=redis_url or f"unix://{data_dir / 'redis.sock'}",
        embedded_redis=not redis_url,
        provisioner_daemons=_int(env, "PROVISIONER_DAEMONS", 3, minimum=0, maximum=64),
        lifecycle_interval=_int(env, "LIFECYCLE_INTERVAL", 60, minimum=0, maximum=3600),
        prebuilds_interval=_int(env, "PREBUILDS_INTERVAL", 15, minimum=0, maximum=3600),
        prebuilds_max_in_flight=_int(env, "PREBUILDS_MAX_IN_FLIGHT", 3, minimum=1, maximum=1000),
        activity_flush_interval=_int(env, "ACTIVITY_FLUSH_INTERVAL", 60, minimum=1, maximum=3600),
        web_workers=web_workers,
        web_worker_connections=worker_connections,
        max_live_connections_per_user=_int(env, "MAX_LIVE_CONNECTIONS_PER_USER", 100, minimum=1, maximum=100_000),
        max_live_connections_per_agent=_int(env, "MAX_LIVE_CONNECTIONS_PER_AGENT", 200, minimum=1, maximum=100_000),
        # Three quarters of this server's slots: the rest stays free for agents, /healthz and sign-in.
        max_live_connections=_int(
            env, "MAX_LIVE_CONNECTIONS", web_workers * worker_connections * 3 // 4, minimum=1, maximum=10_000_000
        ),
        stream_max_lifetime=_duration(env, "STREAM_MAX_LIFETIME", "30m"),
        request_header_timeout=_duration(env, "REQUEST_HEADER_TIMEOUT", "10s"),
        drain_period=_duration(env, "DRAIN_PERIOD", "0s", allow_zero=True),
        # A quarter of a worker's slots: one address (or IPv6 /64) can never take the rest.
        max_connections_per_client=_int(
            env, "MAX_CONNECTIONS_PER_CLIENT", worker_connections // 4, minimum=0, maximum=100_000
        ),
        secret_key=_secret(env, "SECRET_KEY"),
        encryption_keys=_encryption_keys(env),
        session_duration=_duration(env, "SESSION_DURATION", "24h"),
        default_token_lifetime=_duration(env, "DEFAULT_TOKEN_LIFETIME", "30d"),
        max_token_lifetime=_duration(env, "MAX_TOKEN_LIFETIME", "365d"),
        login_failure_limit=_int(env, "LOGIN_FAILURE_LIMIT", 10, minimum=1, maximum=10_000),
        login_failure_window=_duration(env, "LOGIN_FAILURE_WINDOW", "5m"),
        builtin_daemon_psk=_get(env, "BUILTIN_DAEMON_PSK"),
        provisioner_daemon_psk=_secret(env, "PROVISIONER_DAEMON_PSK"),
        provisioner_redis_url=_redis_url(env, "PROVISIONER_REDIS_URL"),
        provisioner_trust_redis=_trusted_credentials(env),
        provisioner_untagged_jobs=_choice(env, "PROVISIONER_UNTAGGED_JOBS", ("any", "untagged-only")),
        provisioner_hang_timeout=_duration(env, "PROVISIONER_HANG_TIMEOUT", "5m"),
        log_retention=_duration(env, "LOG_RETENTION", "0", allow_zero=True),
        audit_retention=_duration(env, "AUDIT_RETENTION", "0", allow_zero=True),
        provisioner_pending_timeout=_duration(env, "PROVISIONER_PENDING_TIMEOUT", "30m"),
        provisioner_force_cancel_interval=_duration(env, "PROVISIONER_FORCE_CANCEL_INTERVAL", "10m"),
        provisioner_heartbeat_interval=_duration(env, "PROVISIONER_HEARTBEAT_INTERVAL", "10s"),
        terraform_path=_get(env, "TERRAFORM_PATH"),
        provisioner_user=_get(env, "PROVISIONER_USER"),
        provisioner_grant_access=_bool(env, "PROVISIONER_GRANT_ACCESS", False),
        provisioner_cache_dir=_path_or_none(env, "PROVISIONER_CACHE_DIR"),
        provisioner_init_cache_size=_size(env, "PROVISIONER_INIT_CACHE_SIZE", "1GiB"),
        secret_files=tuple(
            Path(path).expanduser().absolute()
            for name in (
                "SECRET_KEY",
                "ENCRYPTION_KEYS",
                "EXTERNAL_TOKEN_ENCRYPTION_KEYS",
                "PROVISIONER_DAEMON_PSK",
                "OIDC_CLIENT_SECRET",
                "EMAIL_PASSWORD",
                "NOTIFICATIONS_WEBHOOK_SECRET",
            )  # fmt: skip
            if (path := _get(env, name + "_FILE"))
        ),
        agent_wheelhouse=Path(_get(env, "AGENT_WHEELHOUSE") or default_agent_wheelhouse()).expanduser(),
        agent_heartbeat_interval=_duration(env, "AGENT_HEARTBEAT_INTERVAL", "15s"),
        disable_path_apps=_bool(env, "DISABLE_PATH_APPS", False),
        wildcard_access_url=_parse_wildcard_access_url(_get(env, "WILDCARD_ACCESS_URL"), access_url),
        dangerous_allow_path_app_same_origin=_bool(env, "DANGEROUS_ALLOW_PATH_APP_SAME_ORIGIN", False),
        template_storage_quota=_size(env, "TEMPLATE_STORAGE_QUOTA", "1GiB"),
        max_workspaces_per_person=_int(env, "MAX_WORKSPACES_PER_PERSON", 0, minimum=0, maximum=1_000_000),
        new_templates_for_everyone=_bool(env, "NEW_TEMPLATES_FOR_EVERYONE", True),
    )
    return _with_external_auth(_with_notifications(_with_oidc(settings, env), env), env)


def _with_external_auth(settings: Settings, env: Mapping[str, str]) -> Settings:
    try:
        providers, secret_files = load_external_auth(env)
    except ExternalAuthConfigError as exc:
        raise SettingsError(str(exc)) from None
    return replace(settings, external_auth=providers, secret_files=settings.secret_files + secret_files)


def _with_notifications(settings: Settings, env: Mapping[str, str]) -> Settings:
    smarthost = _get(env, "EMAIL_SMARTHOST")
    if smarthost:
        host, sep, port = smarthost.rpartition(":")
        if not sep or not host or not port.isdecimal() or not 1 <= int(port) <= 65535:
            raise SettingsError(f"{PREFIX}EMAIL_SMARTHOST looks like host:port, got {smarthost!r}")
        if not _get(env, "EMAIL_FROM"):
            raise SettingsError(f"{PREFIX}EMAIL_FROM is needed with {PREFIX}EMAIL_SMARTHOST")
    tls, starttls = _bool(env, "EMAIL_TLS", False), _bool(env, "EMAIL_STARTTLS", False)
    if tls and starttls:
        raise SettingsError(f"{PREFIX}EMAIL_TLS and {PREFIX}EMAIL_STARTTLS exclude each other: pick one")
    webhook = _get(env, "NOTIFICATIONS_WEBHOOK_URL")
    if webhook and (urlsplit(webhook).scheme not in ("http", "https") or not urlsplit(webhook).netloc):
        raise SettingsError(f"{PREFIX}NOTIFICATIONS_WEBHOOK_URL must be an http(s) URL, got {webhook!r}")
    return replace(
        settings,
        email_smarthost=smarthost,
        email_from=_get(env, "EMAIL_FROM"),
        email_tls=tls,
        email_starttls=starttls,
        email_username=_get(env, "EMAIL_USERNAME"),
        email_password=_secret(env, "EMAIL_PASSWORD"),
        notifications_webhook_url=webhook,
        notifications_webhook_secret=_secret(env, "NOTIFICATIONS_WEBHOOK_SECRET"),
    )


def _with_oidc(settings: Settings, env: Mapping[str, str]) -> Settings:
    issuer = _get(env, "OIDC_ISSUER_URL").rstrip("/")
    if issuer and urlsplit(issuer).scheme not in ("http", "https"):
        raise SettingsError(f"{PREFIX}OIDC_ISSUER_URL must be an http(s) URL, got {issuer!r}")
    client_id = _get(env, "OIDC_CLIENT_ID")
    if bool(issuer) != bool(client_id):
        raise SettingsError(f"{PREFIX}OIDC_ISSUER_URL and {PREFIX}OIDC_CLIENT_ID are needed together")
    scopes = tuple(_list(env, "OIDC_SCOPES") or ("openid", "profile", "email"))
    if issuer and "openid" not in scopes:
        raise SettingsError(f"{PREFIX}OIDC_SCOPES must include openid")
    mapping = []
    for pair in _list(env, "OIDC_ROLE_MAPPING"):
        idp_value, sep, role = pair.partition("=")
        if not sep or not idp_value or role not in ("owner", "template-admin", "member"):
            raise SettingsError(
                f"{PREFIX}OIDC_ROLE_MAPPING entries look like idp_value=owner|template-admin|member, got {pair!r}"
            )
        mapping.append((idp_value, role))
    disable_password = _bool(env, "DISABLE_PASSWORD_AUTH", False)
    if disable_password and not issuer:
        raise SettingsError(f"{PREFIX}DISABLE_PASSWORD_AUTH needs OpenID Connect, or nobody could sign in")
    return replace(
        settings,
        oidc_issuer_url=issuer,
        oidc_client_id=client_id,
        oidc_client_secret=_secret(env, "OIDC_CLIENT_SECRET"),
        oidc_scopes=scopes,
        oidc_email_domains=tuple(domain.lower().lstrip("@") for domain in _list(env, "OIDC_EMAIL_DOMAIN")),
        oidc_allow_signups=_bool(env, "OIDC_ALLOW_SIGNUPS", True),
        oidc_username_field=_get(env, "OIDC_USERNAME_FIELD") or "preferred_username",
        oidc_email_field=_get(env, "OIDC_EMAIL_FIELD") or "email",
        oidc_ignore_email_verified=_bool(env, "OIDC_IGNORE_EMAIL_VERIFIED", False),
        oidc_sign_in_text=_get(env, "OIDC_SIGN_IN_TEXT") or "OpenID Connect",
        oidc_icon_url=_get(env, "OIDC_ICON_URL"),
        oidc_role_field=_get(env, "OIDC_ROLE_FIELD"),
        oidc_role_mapping=tuple(mapping),
        disable_password_auth=disable_password,
    )


def _list(env: Mapping[str, str], name: str) -> list[str]:
    """Comma-separated values (repeated flags arrive joined with commas)."""
    return [item.strip() for item in _get(env, name).split(",") if item.strip()]


def _trusted_credentials(env: Mapping[str, str]) -> tuple[str, ...]:
    kinds = tuple(_list(env, "PROVISIONER_TRUST_REDIS"))
    unknown = [kind for kind in kinds if kind not in TRUSTABLE_DAEMON_CREDENTIALS]
    if unknown:
        raise SettingsError(
            f"{PREFIX}PROVISIONER_TRUST_REDIS lists credential kinds ({', '.join(TRUSTABLE_DAEMON_CREDENTIALS)}), "
            f"got {unknown[0]!r}"
        )
    return kinds


def _encryption_keys(env: Mapping[str, str]) -> tuple[bytes, ...]:
    # Coder names the keys of its token store --external-token-encryption-keys; here one keyring encrypts every
    # secret (tokens included), so that name is accepted as the same setting.
    alias = "EXTERNAL_TOKEN_ENCRYPTION_KEYS"
    name = "ENCRYPTION_KEYS"
    if _get(env, alias) or _get(env, alias + "_FILE"):
        if _get(env, name) or _get(env, name + "_FILE"):
            raise SettingsError(f"set only one of {PREFIX}{name} and {PREFIX}{alias}: they are the same keys")
        name = alias
    text = _secret(env, name)
    if not text:
        return ()
    # Here, not at the top: `slipway server` reads its settings before it starts the web server, which it starts
    # first (app/server/web.py); cryptography and Flask are then imported only when keys are configured.
    from app.core.crypto import parse_keys

    try:
        return parse_keys(text)
    except ValueError as exc:
        raise SettingsError(f"{PREFIX}{name}: {exc}") from None


def _bool(env: Mapping[str, str], name: str, default: bool) -> bool:
    raw = _get(env, name).lower()
    if not raw:
        return default
    if raw in ("1", "true", "yes", "on"):
        return True
    if raw in ("0", "false", "no", "off"):
        return False
    raise SettingsError(f"{PREFIX}{name} must be true or false, got {raw!r}")


def split_address(address: str) -> tuple[str, int]:
    host, sep, port_text = address.rpartition(":")
    if not sep or not host:
        raise SettingsError(f"{PREFIX}ADDRESS must look like HOST:PORT, got {address!r}")
    try:
        port = parse_int(port_text, minimum=1, maximum=65535)
    except ValueError:
        raise SettingsError(f"{PREFIX}ADDRESS has an invalid port {port_text!r} (1-65535)") from None
    return host.strip("[]"), port


def ensure_secret_key(settings: Settings) -> Settings:
    """Return settings with a secret key, creating one in the data dir on first start (kept across restarts)."""
    if settings.secret_key:
        return settings
    key_file = settings.data_dir / "secret_key"
    if not key_file.exists():
        settings.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(secrets.token_urlsafe(48))
    return replace(settings, secret_key=key_file.read_text().strip())


def _path_or_none(env: Mapping[str, str], name: str) -> Path | None:
    raw = _get(env, name)
    return Path(raw).expanduser().absolute() if raw else None


def _get(env: Mapping[str, str], name: str) -> str:
    return env.get(PREFIX + name, "").strip()


def _secret(env: Mapping[str, str], name: str) -> str:
    """A secret comes from ``SLIPWAY_NAME`` or from the file named by ``SLIPWAY_NAME_FILE`` (e.g. a k8s secret)."""
    value = _get(env, name)
    path = _get(env, name + "_FILE")
    if value and path:
        raise SettingsError(f"set only one of {PREFIX}{name} and {PREFIX}{name}_FILE")
    if path:
        try:
            return Path(path).read_text().strip()
        except OSError as exc:
            raise SettingsError(f"{PREFIX}{name}_FILE: cannot read {path}: {exc.strerror}") from exc
    return value


def _int(env: Mapping[str, str], name: str, default: int, *, minimum: int, maximum: int) -> int:
    raw = _get(env, name)
    if not raw:
        return default
    try:
        return parse_int(raw, minimum=minimum, maximum=maximum)
    except ValueError:
        raise SettingsError(f"{PREFIX}{name} must be a whole number from {minimum} to {maximum}, got {raw!r}") from None


def _choice(env: Mapping[str, str], name: str, choices: tuple[str, ...]) -> str:
    raw = _get(env, name) or choices[0]
    if raw not in choices:
        raise SettingsError(f"{PREFIX}{name} must be one of {', '.join(choices)}, got {raw!r}")
    return raw


def draining_marker(data_dir: Path) -> Path:
    """The file whose presence says this replica is draining: written by `slipway server` on SIGTERM, read by
    /healthz and the live streams of its web workers (other processes: a file is what they share)."""
    return data_dir / "draining"


def _duration(env: Mapping[str, str], name: str, default: str, *, allow_zero: bool = False) -> int:
    raw = _get(env, name) or default
    try:
        seconds = parse_duration(raw)
    except ValueError as exc:
        raise SettingsError(f"{PREFIX}{name}: {exc}") from exc
    if seconds <= 0 and not allow_zero:
        raise SettingsError(f"{PREFIX}{name} must be longer than zero")
    return seconds


def _size(env: Mapping[str, str], name: str, default: str) -> int:
    raw = _get(env, name) or default
    try:
        return parse_size(raw)
    except ValueError as exc:
        raise SettingsError(f"{PREFIX}{name}: {exc}") from exc


def _redis_url(env: Mapping[str, str], name: str) -> str:
    url = _get(env, name)
    if url and urlsplit(url).scheme not in ("redis", "rediss", "unix"):
        raise SettingsError(f"{PREFIX}{name} must start with redis://, rediss:// or unix://, got {url!r}")
    return url


def _parse_access_url(raw: str) -> str:
    parts = urlsplit(raw)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise SettingsError(f"{PREFIX}ACCESS_URL must be an http:// or https:// URL, got {raw!r}")
    return raw.rstrip("/")


_WILDCARD = re.compile(r"^\*(?P<suffix>[.-][a-z0-9.-]*[a-z0-9])(?::(?P<port>[0-9]{1,5}))?$")


def _parse_wildcard_access_url(raw: str, access_url: str) -> str:
    """``*.example.com`` or ``*--apps.example.com``, a port optional (Coder accepts a scheme too: it is dropped, the
    access URL's is used). The dashboard's own host must not match it, or the dashboard would be an app."""
    if not raw:
        return ""
    pattern = raw.lower().split("://", 1)[-1].rstrip("/")
    match = _WILDCARD.match(pattern)
    if match is None or (match["port"] and not 1 <= int(match["port"]) <= 65535):
        raise SettingsError(f"{PREFIX}WILDCARD_ACCESS_URL must look like *.apps.example.com[:port], got {raw!r}")
    dashboard = (urlsplit(access_url).hostname or "").lower()
    if dashboard.endswith(match["suffix"]) and "." not in dashboard[: -len(match["suffix"])]:
        raise SettingsError(f"{PREFIX}WILDCARD_ACCESS_URL {raw!r} covers the access URL's own host {dashboard!r}")
    return pattern


def _parse_database_url(raw: str) -> str:
    # Here, not at the top, for the same reason as in _encryption_keys (SQLAlchemy's import is a quarter second).
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        url = make_url(raw)
    except ArgumentError as exc:
        raise SettingsError(f"{PREFIX}DATABASE_URL is not a database URL: {raw!r}") from exc
    if url.get_backend_name() not in SUPPORTED_DATABASES:
        raise SettingsError(
            f"{PREFIX}DATABASE_URL must be sqlite:/// or postgresql+psycopg://, got {url.get_backend_name()!r}"
        )
    if url.get_backend_name() == "postgresql":
        # psycopg 3 is the driver we ship; plain postgresql:// would ask for psycopg2.
        url = url.set(drivername="postgresql+psycopg")
    return url.render_as_string(hide_password=False)
