"""The wheelhouse builder, against the real package index: pins, platforms, and failures that keep old builds."""

from __future__ import annotations

import shutil
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

from cli.wheelhouse import build_wheelhouse, pinned_requirements, pip_failure
from tests.support.agent_bundle import native_platform, native_wheelhouse


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return native_wheelhouse(tmp_path_factory)


def test_pins_are_the_versions_this_server_runs_with() -> None:
    direct, constraints = pinned_requirements()
    assert direct == [f"{name}=={version(name)}" for name in ("asyncssh", "websockets", "httpx")]
    pinned = dict(line.split("==") for line in constraints)
    for name in ("cryptography", "cffi", "pycparser", "anyio", "httpcore", "h11", "idna", "certifi"):
        assert pinned[name] == version(name), name
    # Extras nobody asked for are not followed.
    assert not {"bcrypt", "h2", "brotli", "socksio", "trio", "fido2"} & set(pinned)


def test_native_platform_has_wheels_for_every_python_version(wheelhouse: Path) -> None:
    folder = wheelhouse / native_platform()
    direct, _ = pinned_requirements()
    assert (folder / "requirements.txt").read_text().split() == direct
    assert (folder / "python-versions.txt").read_text().split() == ["3.11", "3.12", "3.13"]
    wheels = sorted(wheel.name for wheel in folder.glob("*.whl"))
    for name in ("asyncssh", "websockets", "httpx", "cryptography", "cffi", "anyio", "h11", "idna", "certifi"):
        assert any(wheel.startswith(f"{name}-{version(name)}-") for wheel in wheels), name
    for python in ("311", "312", "313"):
        assert any(wheel.startswith("cffi-") and f"-cp{python}-cp{python}-" in wheel for wheel in wheels), python
    platform_tag = "macosx" if native_platform().startswith("darwin") else "manylinux"
    assert all(wheel.endswith("-none-any.whl") or platform_tag in wheel for wheel in wheels)
    # Nothing but the platform folders is left behind (scratch downloads are removed).
    assert sorted(path.name for path in wheelhouse.iterdir()) == [native_platform()]


def test_a_failed_build_keeps_the_previous_one(wheelhouse: Path, tmp_path: Path) -> None:
    copy = tmp_path / "wheels"
    shutil.copytree(wheelhouse, copy)
    before = sorted(path.name for path in (copy / native_platform()).iterdir())
    lines: list[str] = []
    # No pinned version supports Python 3.6, so pip finds nothing: a failure that is the same on every machine.
    report = build_wheelhouse(copy, [native_platform()], ["3.6"], progress=lines.append)
    [result] = report.platforms
    assert not result.ok and not report.built
    assert result.errors["3.6"].startswith("no wheels for")
    assert lines == [f"{native_platform()} Python 3.6: failed: {result.errors['3.6']}"]
    assert sorted(path.name for path in (copy / native_platform()).iterdir()) == before


def test_pip_failures_are_told_in_one_line() -> None:
    offline = "WARNING: Retrying ... NewConnectionError('<pip._vendor.urllib3...>: Failed to establish')\nERROR: x"
    assert pip_failure(offline) == "could not reach the package index (NewConnectionError)"
    missing = (
        "ERROR: Cannot install asyncssh because these package versions have conflicting dependencies.\n"
        "Additionally, some packages in these conflicts have no matching distributions available for your "
        "environment:\n    cffi\n\nTo fix this you could try to:\n"
    )
    assert pip_failure(missing) == "no wheels for cffi"
    assert pip_failure("ERROR: No matching distribution found for httpx==0.28.1\n") == "no wheels for httpx==0.28.1"
    assert pip_failure("Something odd\nERROR: it broke\n") == "ERROR: it broke"


def test_cli_reports_what_it_could_not_build(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "cli.agent_bundle", "--dest", str(tmp_path / "wheels")]
    refused = subprocess.run([*command, "--python-version", "three"], capture_output=True, text=True, check=False)
    assert refused.returncode == 2 and "is not a Python version like 3.12" in refused.stderr
    failed = subprocess.run(
        [*command, "--platform", native_platform(), "--python-version", "3.6"],
        capture_output=True,
        text=True,
        check=False,
        timeout=240,
    )
    assert failed.returncode == 1
    assert f"{native_platform()}: not built: no wheels for" in failed.stderr and "(Python 3.6)" in failed.stderr
    assert failed.stdout.splitlines()[-1].startswith("Agent bundle: built nothing")
