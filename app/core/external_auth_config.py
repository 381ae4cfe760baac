"""The Git providers (external auth) a deployment connects to, parsed once at start.

Two ways to give them, as Coder does: numbered environment variables (``SLIPWAY_EXTERNAL_AUTH_0_ID=github``,
``SLIPWAY_EXTERNAL_AUTH_0_TYPE``, ``..._CLIENT_ID``, ``..._CLIENT_SECRET`` or ``..._CLIENT_SECRET_FILE`` …), or a
YAML/TOML file (``SLIPWAY_EXTERNAL_AUTH_CONFIG``, a list under ``external_auth``). Each type brings its
endpoints, scopes and the remote URLs it serves, so a GitHub entry needs only an id, a client id and a secret.
Every mistake is an :class:`ExternalAuthConfigError` whose one line names the entry.
"""

# ruff: noqa: S106 - the per-type "token_url"s are endpoints, not passwords

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

ENV_PREFIX = "SLIPWAY_EXTERNAL_AUTH_"
_ENV_ENTRY = re.compile(r"^SLIPWAY_EXTERNAL_AUTH_(\d+)_([A-Z_]+)$")
_ID = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$", re.IGNORECASE)


class ExternalAuthConfigError(ValueError):
    """One line for the operator, naming the entry and the field."""


@dataclass(frozen=True)
class ExternalAuthProvider:
    id: str
    type: str
    client_id: str
    client_secret: str = ""
    auth_url: str = ""
    token_url: str = ""
    # Answers 200 for a valid token (GitHub's /user); "" = the type has none, a token counts as valid until refused.
    validate_url: str = ""
    revoke_url: str = ""
    device_code_url: str = ""
    scopes: tuple[str, ...] = ()
    # Which remote URLs (as git hands them to GIT_ASKPASS) this provider serves.
    regex: str = ""
    display_name: str = ""
    display_icon: str = ""
    device_flow: bool = False
    no_refresh: bool = False
    # PKCE (S256) on the authorization code flow; every type here supports it except Bitbucket Server.
    pkce: bool = True
    # How git authenticates with the token over HTTPS: username "oauth2" (GitLab), "x-access-token" (GitHub) …
    git_username: str = "oauth2"

    def matches(self, url: str) -> bool:
        return bool(self.regex) and re.search(self.regex, url) is not None


@dataclass(frozen=True)
class _TypeDefaults:
    display_name: str
    auth_url: str = ""
    token_url: str = ""
    validate_url: str = ""
    revoke_url: str = ""
    device_code_url: str = ""
    scopes: tuple[str, ...] = ()
    regex: str = ""
    display_icon: str = ""
    pkce: bool = True
    git_username: str = "oauth2"


TYPE_DEFAULTS: dict[str, _TypeDefaults] = {
    "github": _TypeDefaults(
        display_name="GitHub",
        auth_url="https://github.com/login/oauth/authorize",
        token_url="https://github.com/login/oauth/access_token",
        validate_url="https://api.github.com/user",
        device_code_url="https://github.com/login/device/code",
        scopes=("repo", "workflow"),
        regex=r"^(https?://)?github\.com(/.*)?$",
        git_username="x-access-token",
    ),
    "gitlab": _TypeDefaults(
        display_name="GitLab",
        auth_url="https://gitlab.com/oauth/authorize",
        token_url="https://gitlab.com/oauth/token",
        validate_url="https://gitlab.com/oauth/token/info",
        revoke_url="https://gitlab.com/oauth/revoke",
        scopes=("write_repository",),
        regex=r"^(https?://)?gitlab\.com(/.*)?$",
    ),
    "gitea": _TypeDefaults(
        display_name="Gitea",
        auth_url="https://gitea.com/login/oauth/authorize",
        token_url="https://gitea.com/login/oauth/access_token",
        validate_url="https://gitea.com/login/oauth/userinfo",
        scopes=("write:repository", "read:user"),
        regex=r"^(https?://)?gitea\.com(/.*)?$",
    ),
    "bitbucket-cloud": _TypeDefaults(
        display_name="Bitbucket",
        auth_url="https://bitbucket.org/site/oauth2/authorize",
        token_url="https://bitbucket.org/site/oauth2/access_token",
        validate_url="https://api.bitbucket.org/2.0/user",
        scopes=("account", "repository:write"),
        regex=r"^(https?://)?bitbucket\.org(/.*)?$",
        git_username="x-token-auth",
    ),
    # Self-hosted only: its URLs depend on the server, so they must be given (checked below).
    "bitbucket-server": _TypeDefaults(
        display_name="Bitbucket Server",
        scopes=("PUBLIC_REPOS", "REPO_READ", "REPO_WRITE"),
        pkce=False,
        git_username="x-token-auth",
    ),  # fmt: skip
    "azure-devops": _TypeDefaults(
        display_name="Azure DevOps",
        auth_url="https://app.vssps.visualstudio.com/oauth2/authorize",
        token_url="https://app.vssps.visualstudio.com/oauth2/token",
        scopes=("vso.code_write",),
        regex=r"^(https?://)?dev\.azure\.com(/.*)?$",
    ),
    # A generic OAuth2 or OpenID provider: every URL comes from the entry.
    "oauth2": _TypeDefaults(display_name="OAuth2 provider"),
}
TYPE_ALIASES = {"generic": "oauth2", "oidc": "oauth2", "openid": "oauth2", "bitbucket": "bitbucket-cloud"}
_URL_FIELDS = ("auth_url", "token_url", "validate_url", "revoke_url", "device_code_url")
_STRING_FIELDS = {f.name for f in fields(ExternalAuthProvider)} - {"scopes", "device_flow", "no_refresh", "pkce"}


def load_external_auth(env: Mapping[str, str]) -> tuple[tuple[ExternalAuthProvider, ...], tuple[Path, ...]]:
    """Every provider from the environment and the config file, and the files their secrets came from."""
    raw_entries: list[tuple[str, dict[str, Any]]] = []
    secret_files: list[Path] = []
    config_file = env.get("SLIPWAY_EXTERNAL_AUTH_CONFIG", "").strip()
    if config_file:
        for index, entry in enumerate(_read_config_file(Path(config_file).expanduser())):
            raw_entries.append((f"{config_file} entry {index}", entry))
    numbered: dict[int, dict[str, Any]] = {}
    for name, value in env.items():
        match = _ENV_ENTRY.match(name)
        if match:
            numbered.setdefault(int(match.group(1)), {})[match.group(2).lower()] = value
    for number in sorted(numbered):
        raw_entries.append((f"{ENV_PREFIX}{number}", numbered[number]))
    providers: list[ExternalAuthProvider] = []
    for where, entry in raw_entries:
        secret_file = str(entry.get("client_secret_file") or "").strip()
        if secret_file:
            secret_files.append(Path(secret_file).expanduser().absolute())
        provider = parse_provider(where, entry)
        if any(existing.id == provider.id for existing in providers):
            raise ExternalAuthConfigError(f"{where}: id {provider.id!r} is used by another provider")
        providers.append(provider)
    return tuple(providers), tuple(secret_files)


def parse_provider(where: str, entry: Mapping[str, Any]) -> ExternalAuthProvider:
    known = _STRING_FIELDS | {"scopes", "device_flow", "no_refresh", "pkce", "client_secret_file"}
    values = {name: str(entry.get(name) or "").strip() for name in _STRING_FIELDS}
    ident = values["id"]
    label = f"{where} ({ident})" if ident else where
    unknown = sorted(set(entry) - known)
    if unknown:
        raise ExternalAuthConfigError(f"{label}: unknown field {unknown[0]!r}")
    named = values["type"].lower() or ident.lower()  # `id: github` alone is a GitHub provider, as in Coder
    kind = TYPE_ALIASES.get(named, named)
    if not ident:
        raise ExternalAuthConfigError(f"{where}: id is required")
    if not _ID.match(ident):
        raise ExternalAuthConfigError(f"{label}: id must be letters, digits, '.', '_' or '-', got {ident!r}")
    if not values["type"] and kind not in TYPE_DEFAULTS:
        raise ExternalAuthConfigError(f"{label}: type is required ({', '.join(TYPE_DEFAULTS)})")
    if kind not in TYPE_DEFAULTS:
        raise ExternalAuthConfigError(
            f"{label}: type must be one of {', '.join(TYPE_DEFAULTS)}, got {values['type'] or ident!r}"
        )
    if not values["client_id"]:
        raise ExternalAuthConfigError(f"{label}: client_id is required")
    values["client_secret"] = _client_secret(label, values["client_secret"], entry.get("client_secret_file"))
    defaults = TYPE_DEFAULTS[kind]
    _fill_endpoints(label, kind, values, defaults)
    device_flow = _flag(label, entry, "device_flow", False)
    if device_flow and not values["device_code_url"]:
        raise ExternalAuthConfigError(f"{label}: device_flow needs device_code_url for type {kind}")
    return ExternalAuthProvider(
        **{name: values[name] for name in _STRING_FIELDS - {"type"}},
        type=kind,
        scopes=_scopes(label, entry.get("scopes"), defaults.scopes),
        device_flow=device_flow,
        no_refresh=_flag(label, entry, "no_refresh", False),
        pkce=_flag(label, entry, "pkce", defaults.pkce),
    )


def _fill_endpoints(label: str, kind: str, values: dict[str, str], defaults: _TypeDefaults) -> None:
    """The type's URLs, regex and names where the entry gives none, then checked."""
    for name in ("auth_url", "token_url", "validate_url", "revoke_url", "device_code_url", "regex", "display_icon"):
        values[name] = values[name] or getattr(defaults, name)
    values["display_name"] = values["display_name"] or defaults.display_name
    values["git_username"] = values["git_username"] or defaults.git_username
    for name in ("auth_url", "token_url"):
        if not values[name]:
            raise ExternalAuthConfigError(f"{label}: {name} is required for type {kind}")
    for name in _URL_FIELDS:
        parts = urlsplit(values[name])
        if values[name] and (parts.scheme not in ("http", "https") or not parts.netloc):
            raise ExternalAuthConfigError(f"{label}: {name} must be an http(s) URL, got {values[name]!r}")
    if not values["regex"]:
        # A generic provider serves the host it lives on unless told otherwise.
        values["regex"] = "^(https?://)?" + re.escape(urlsplit(values["auth_url"]).netloc) + "(/.*)?$"
    try:
        re.compile(values["regex"])
    except re.error as exc:
        raise ExternalAuthConfigError(f"{label}: regex does not compile: {exc}") from None


def _client_secret(label: str, value: str, file: object) -> str:
    path = str(file or "").strip()
    if value and path:
        raise ExternalAuthConfigError(f"{label}: set only one of client_secret and client_secret_file")
    if not path:
        return value
    try:
        return Path(path).expanduser().read_text().strip()
    except OSError as exc:
        raise ExternalAuthConfigError(f"{label}: client_secret_file: cannot read {path}: {exc.strerror}") from None


def _scopes(label: str, raw: object, default: tuple[str, ...]) -> tuple[str, ...]:
    if raw is None or raw == "":
        return default
    if isinstance(raw, str):
        items = raw.replace(",", " ").split()
    elif isinstance(raw, list) and all(isinstance(item, str) for item in raw):
        items = [item.strip() for item in raw if item.strip()]
    else:
        raise ExternalAuthConfigError(f"{label}: scopes must be a list of strings or a space-separated string")
    return tuple(items)


def _flag(label: str, entry: Mapping[str, Any], name: str, default: bool) -> bool:
    raw = entry.get(name)
    if raw is None or raw == "":
        return default
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ExternalAuthConfigError(f"{label}: {name} must be true or false, got {raw!r}")


def _read_config_file(path: Path) -> list[dict[str, Any]]:
    where = f"SLIPWAY_EXTERNAL_AUTH_CONFIG {path}"
    try:
        text = path.read_text()
    except OSError as exc:
        raise ExternalAuthConfigError(f"{where}: cannot read it: {exc.strerror}") from None
    try:
        document = tomllib.loads(text) if path.suffix == ".toml" else yaml.safe_load(text)
    except (tomllib.TOMLDecodeError, yaml.YAMLError) as exc:
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ExternalAuthConfigError(f"{where}: does not parse: {first_line}") from None
    entries = document.get("external_auth") if isinstance(document, dict) else None
    if not isinstance(entries, list) or not all(isinstance(item, dict) for item in entries):
        raise ExternalAuthConfigError(f"{where}: must hold a list of providers under 'external_auth'")
    return [{str(key).lower(): value for key, value in item.items()} for item in entries]
