"""The manifest (README "Manifest"), parsed tolerantly: a field that is missing or of the wrong type takes its
default, so a newer server adding fields, or an older one lacking some, does not stop the agent."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


class ManifestError(ValueError):
    """The manifest is not a JSON object at all."""


@dataclass(frozen=True)
class AgentScript:
    log_source_id: str
    display_name: str = ""
    icon: str = ""
    script: str = ""
    cron: str = ""
    run_on_start: bool = False
    run_on_stop: bool = False
    start_blocks_login: bool = False
    timeout_seconds: int = 0  # 0: no timeout
    log_path: str = ""

    @property
    def name(self) -> str:
        return self.display_name or self.log_source_id


@dataclass(frozen=True)
class MetadataDescription:
    key: str
    display_name: str = ""
    script: str = ""
    interval_seconds: int = 10
    timeout_seconds: int = 0  # 0: the interval


@dataclass(frozen=True)
class Healthcheck:
    url: str
    interval_seconds: int = 5
    threshold: int = 3


@dataclass(frozen=True)
class App:
    slug: str
    display_name: str = ""
    url: str = ""
    command: str = ""
    healthcheck: Healthcheck | None = None


@dataclass(frozen=True)
class Manifest:
    agent_id: str = ""
    agent_name: str = ""
    workspace_id: str = ""
    workspace_name: str = ""
    owner_name: str = ""
    directory: str = ""
    environment_variables: Mapping[str, str] = field(default_factory=dict)
    motd_file: str = ""
    scripts: tuple[AgentScript, ...] = ()
    metadata: tuple[MetadataDescription, ...] = ()
    apps: tuple[App, ...] = ()
    heartbeat_seconds: int = 15
    log_limit_bytes: int = 1024 * 1024

    @property
    def start_scripts(self) -> tuple[AgentScript, ...]:
        return tuple(script for script in self.scripts if script.run_on_start)

    @property
    def stop_scripts(self) -> tuple[AgentScript, ...]:
        return tuple(script for script in self.scripts if script.run_on_stop)

    @property
    def cron_scripts(self) -> tuple[AgentScript, ...]:
        return tuple(script for script in self.scripts if script.cron.strip())


def _text(data: Mapping[str, Any], key: str, default: str = "") -> str:
    value = data.get(key)
    return value if isinstance(value, str) else default


def _flag(data: Mapping[str, Any], key: str, default: bool = False) -> bool:
    value = data.get(key)
    return value if isinstance(value, bool) else default


def _number(data: Mapping[str, Any], key: str, default: int) -> int:
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return default
    return int(value)


def _objects(data: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
    value = data.get(key)
    if not isinstance(value, list):
        return []
    return [item for item in value if isinstance(item, dict)]


def _script(data: Mapping[str, Any]) -> AgentScript:
    return AgentScript(
        log_source_id=_text(data, "log_source_id"),
        display_name=_text(data, "display_name"),
        icon=_text(data, "icon"),
        script=_text(data, "script"),
        cron=_text(data, "cron"),
        run_on_start=_flag(data, "run_on_start"),
        run_on_stop=_flag(data, "run_on_stop"),
        start_blocks_login=_flag(data, "start_blocks_login"),
        timeout_seconds=max(_number(data, "timeout", 0), 0),
        log_path=_text(data, "log_path"),
    )


def _metadata(data: Mapping[str, Any]) -> MetadataDescription:
    return MetadataDescription(
        key=_text(data, "key"),
        display_name=_text(data, "display_name"),
        script=_text(data, "script"),
        interval_seconds=_number(data, "interval", 10),
        timeout_seconds=_number(data, "timeout", 0),
    )


def _app(data: Mapping[str, Any]) -> App:
    check = data.get("healthcheck")
    healthcheck = None
    if isinstance(check, dict) and _text(check, "url"):
        healthcheck = Healthcheck(
            url=_text(check, "url"),
            interval_seconds=_number(check, "interval", 5),
            threshold=_number(check, "threshold", 3),
        )
    return App(
        slug=_text(data, "slug"),
        display_name=_text(data, "display_name"),
        url=_text(data, "url"),
        command=_text(data, "command"),
        healthcheck=healthcheck,
    )


def parse_manifest(data: object) -> Manifest:
    if not isinstance(data, dict):
        raise ManifestError(f"the manifest is a JSON {type(data).__name__}, not an object")
    raw_env = data.get("environment_variables")
    environment = (
        {str(name): str(value) for name, value in raw_env.items() if value is not None}
        if isinstance(raw_env, dict)
        else {}
    )
    return Manifest(
        agent_id=_text(data, "agent_id"),
        agent_name=_text(data, "agent_name"),
        workspace_id=_text(data, "workspace_id"),
        workspace_name=_text(data, "workspace_name"),
        owner_name=_text(data, "owner_name"),
        directory=_text(data, "directory"),
        environment_variables=environment,
        motd_file=_text(data, "motd_file"),
        scripts=tuple(_script(item) for item in _objects(data, "scripts")),
        metadata=tuple(_metadata(item) for item in _objects(data, "metadata") if _text(item, "key")),
        apps=tuple(_app(item) for item in _objects(data, "apps") if _text(item, "slug")),
        heartbeat_seconds=_number(data, "heartbeat_seconds", 15),
        log_limit_bytes=_number(data, "log_limit_bytes", 1024 * 1024),
    )
