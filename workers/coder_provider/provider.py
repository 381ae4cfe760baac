"""The `coder/coder` provider: its configuration (`url`) and the resources and data sources it serves."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from tf.iface import DataSource, Provider, Resource
from tf.schema import Schema
from tf.utils import Diagnostics

from workers.coder_provider.agent import AgentInstanceResource, AgentResource
from workers.coder_provider.base import STRING, env, optional
from workers.coder_provider.parameter import ParameterDataSource
from workers.coder_provider.peripherals import (
    AppResource,
    DevcontainerResource,
    EnvResource,
    ExternalAgentResource,
    MetadataResource,
    ScriptResource,
)
from workers.coder_provider.presets import WorkspacePresetDataSource
from workers.coder_provider.tasks import AITaskResource, TaskDataSource
from workers.coder_provider.workspace import (
    ExternalAuthDataSource,
    ProvisionerDataSource,
    SecretDataSource,
    WorkspaceDataSource,
    WorkspaceOwnerDataSource,
    WorkspaceTagsDataSource,
)

# Coder's own fallback, kept so that a template planned outside any build behaves as it would with Coder.
DEFAULT_URL = "https://mydeployment.coder.com"


class CoderProvider(Provider):  # type: ignore[misc]  # tf ships no type information
    def __init__(self) -> None:
        self.url = DEFAULT_URL

    def get_model_prefix(self) -> str:
        return "coder_"

    def full_name(self) -> str:
        return "registry.terraform.io/coder/coder"

    def get_provider_schema(self, diags: Diagnostics) -> Schema:
        return Schema(attributes=[optional("url", STRING)])

    def validate_config(self, diags: Diagnostics, config: dict[str, Any]) -> None:
        url = config.get("url")
        if isinstance(url, str):
            self._check_url(diags, url)

    def configure_provider(self, diags: Diagnostics, config: dict[str, Any]) -> None:
        url = config.get("url")
        self.url = url if isinstance(url, str) else env("CODER_AGENT_URL", DEFAULT_URL)
        self._check_url(diags, self.url)

    @staticmethod
    def _check_url(diags: Diagnostics, url: str) -> None:
        parts = urlsplit(url)
        if not url or parts.scheme not in ("http", "https") or not parts.netloc:
            diags.add_error("Invalid provider url", f"url {url!r} must be an absolute http(s) URL", path=["url"])

    @property
    def access_url(self) -> str:
        """The URL agents dial, with the trailing slash Coder's bootstrap scripts expect before their paths."""
        return self.url if self.url.endswith("/") else self.url + "/"

    def get_resources(self) -> list[type[Resource]]:
        return [
            AgentResource,
            AgentInstanceResource,
            AppResource,
            EnvResource,
            MetadataResource,
            ScriptResource,
            AITaskResource,
            ExternalAgentResource,
            DevcontainerResource,
        ]

    def get_data_sources(self) -> list[type[DataSource]]:
        return [
            ParameterDataSource,
            WorkspaceDataSource,
            WorkspaceOwnerDataSource,
            ProvisionerDataSource,
            ExternalAuthDataSource,
            WorkspaceTagsDataSource,
            TaskDataSource,
            SecretDataSource,
            WorkspacePresetDataSource,
        ]
