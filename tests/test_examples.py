"""The shipped example templates: well-formed, with the variables their READMEs promise.

`local` is built end to end in test_e2e_local.py; `docker` and `kubernetes` need a Docker daemon or a cluster
and their providers, so here they are checked as far as an offline machine can.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from workers.terraform import find_terraform, read_variables

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


@pytest.mark.parametrize("name", ["local", "docker", "kubernetes"])
def test_example_is_formatted_and_documented(name: str) -> None:
    result = subprocess.run(
        find_terraform().argv("fmt", "-check", "-diff", str(EXAMPLES / name)),
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    readme = (EXAMPLES / name / "README.md").read_text()
    assert "slipway templates push" in readme


def test_example_variables() -> None:
    kubernetes = {v.name: v for v in read_variables(EXAMPLES / "kubernetes")}
    assert kubernetes["namespace"].required and not kubernetes["use_kubeconfig"].required
    docker = {v.name: v for v in read_variables(EXAMPLES / "docker")}
    assert not docker["docker_socket"].required
    local = {v.name: v for v in read_variables(EXAMPLES / "local")}
    assert local["workspaces_root"].default_value == "/tmp/slipway-workspaces"
