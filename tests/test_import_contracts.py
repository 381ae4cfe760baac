"""The import contracts `make lint` checks (pyproject.toml, [tool.importlinter]) catch what they are there for.

Each case copies the packages into a scratch directory, adds one import that breaks a rule, and runs lint-imports
there: it must fail and name the rule. The untouched copy passes, so a failure is the added line's doing."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("app", "workers", "agent", "cli", "protocol")
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    copy = tmp_path_factory.mktemp("packages")
    for package in PACKAGES:
        shutil.copytree(ROOT / package, copy / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", copy / "pyproject.toml")
    return copy


def lint_imports(tree: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"],
        cwd=tree,
        env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_packages_as_they_are_keep_every_contract(pristine: Path) -> None:
    checked = lint_imports(pristine)
    assert checked.returncode == 0, checked.stdout + checked.stderr


@pytest.mark.parametrize(
    ("module", "added_import", "broken_rule"),
    [
        ("workers/runner.py", "import app.core.config", "The one rule"),
        ("cli/client.py", "from app.users import models", "The one rule"),
        ("protocol/codec.py", "import workers.runner", "protocol imports nothing of ours"),
        ("app/users/services.py", "import app.workspaces.services", "The server's layers"),
        ("workers/terraform/variables.py", "import workers.flows", "No import loops"),
    ],
)
def test_an_import_across_a_rule_fails_the_lint(
    pristine: Path, tmp_path: Path, module: str, added_import: str, broken_rule: str
) -> None:
    tree = tmp_path / "tree"
    shutil.copytree(pristine, tree)
    target = tree / module
    target.write_text(target.read_text() + f"\n{added_import}  # added by the test\n")
    checked = lint_imports(tree)
    assert checked.returncode != 0, f"{module}: `{added_import}` went unnoticed"
    # lint-imports wraps long contract names over lines: join them, then read the verdict after the name.
    report = "".join(checked.stdout.split("Contracts\n")[-1].splitlines())
    verdict = re.search(r"(KEPT|BROKEN)", report[report.index(broken_rule) :])
    assert verdict is not None and verdict.group(1) == "BROKEN", checked.stdout
