"""Templates from Coder ship lock files pinning the real coder/coder provider; they must still build here."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from workers.flows import drop_coder_lock_entry
from workers.provider_install import install_coder_provider
from workers.terraform import terraform_environment

MAIN_TF = 'terraform {\n  required_providers {\n    coder = {\n      source = "coder/coder"\n    }\n  }\n}\n'
LOCK = """# This file is maintained automatically by "terraform init".
provider "registry.terraform.io/coder/coder" {
  version     = "2.13.0"
  constraints = ">= 2.0.0"
  hashes = [
    "h1:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
  ]
}

provider "registry.terraform.io/kreuzwerker/docker" {
  version = "3.0.2"
  hashes = [
    "h1:BBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB=",
  ]
}
"""


def _init(workdir: Path, cache: Path) -> subprocess.CompletedProcess[str]:
    terraform = shutil.which("terraform")
    assert terraform, "terraform must be on PATH for this test"
    env = terraform_environment(
        os.environ, {}, plugin_cache=cache / "plugins", cli_config_file=install_coder_provider(cache)
    )
    return subprocess.run(
        [terraform, "init", "-input=false", "-no-color"],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.mark.parametrize("drop", [False, True])
def test_lock_entry_of_real_coder_provider(tmp_path: Path, drop: bool) -> None:
    workdir = tmp_path / "template"
    workdir.mkdir()
    (workdir / "main.tf").write_text(MAIN_TF)
    (workdir / ".terraform.lock.hcl").write_text(LOCK)
    if drop:
        drop_coder_lock_entry(workdir)
        remaining = (workdir / ".terraform.lock.hcl").read_text()
        assert "coder/coder" not in remaining and "kreuzwerker/docker" in remaining
    result = _init(workdir, tmp_path / "cache")
    if drop:
        assert result.returncode == 0, result.stdout + result.stderr
    else:  # proves the test can fail: the pinned hashes do not match our provider
        assert result.returncode != 0
        assert "checksum" in (result.stdout + result.stderr).lower()
