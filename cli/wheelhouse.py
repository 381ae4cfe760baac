"""The wheelhouse the agent bundle is built from: ``pip download`` of the agent's dependencies, pinned to the
versions this Slipway runs with, once per platform and Python version, concurrently, into
``<wheelhouse>/<os>-<arch>/``. The only step that needs PyPI; the server packs bundles from the result
(``app/agents/bundles.py``)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

from protocol.agent_bundle import (
    AGENT_DEPENDENCIES,
    DEFAULT_PLATFORMS,
    PLATFORMS,
    PYTHON_VERSIONS,
    REQUIREMENTS,
    VERSIONS_FILE,
    Platform,
)

# One pip download per platform and Python version; PyPI and a mirror both cope with this many at once.
DEFAULT_JOBS = 8
PIP_TIMEOUT = 900
_NETWORK_TROUBLE = re.compile(
    r"NewConnectionError|Max retries exceeded|Temporary failure in name resolution|Network is unreachable|"
    r"Could not fetch URL|ConnectTimeout|ProxyError|SSLError"
)


class WheelhouseError(Exception):
    """The wheelhouse cannot be built at all (the message is for the operator)."""


@dataclass(frozen=True)
class DownloadResult:
    platform: str
    python_version: str
    ok: bool
    directory: Path
    seconds: float
    error: str = ""


@dataclass
class PlatformResult:
    platform: str
    python_versions: list[str] = field(default_factory=list)
    wheels: int = 0
    size: int = 0
    # Python version → why its wheels could not be fetched.
    errors: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return bool(self.python_versions)


@dataclass(frozen=True)
class WheelhouseReport:
    directory: Path
    platforms: list[PlatformResult]
    seconds: float

    @property
    def built(self) -> list[PlatformResult]:
        return [result for result in self.platforms if result.ok]


def canonical_name(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pinned_requirements(names: Iterable[str] = AGENT_DEPENDENCIES) -> tuple[list[str], list[str]]:
    """``name==version`` pins of the agent's direct dependencies, and of everything installed they pull in.

    Requirements behind an extra are not followed. One whose marker this server does not meet and that is not
    installed here (say, a backport for older Pythons) is left out: pip resolves it for the target, unpinned.
    """
    direct = []
    for name in names:
        try:
            direct.append(f"{canonical_name(name)}=={distribution(name).version}")
        except PackageNotFoundError:
            raise WheelhouseError(f"{name} is not installed on this server, so its version cannot be pinned") from None
    pinned: dict[str, str] = {}
    queue = list(names)
    while queue:
        name = canonical_name(queue.pop())
        if name in pinned:
            continue
        try:
            dist = distribution(name)
        except PackageNotFoundError:
            continue
        pinned[name] = dist.version
        for requirement in dist.requires or []:
            spec, _, marker = requirement.partition(";")
            if re.search(r"\bextra\s*==", marker):
                continue
            match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", spec)
            if match:
                queue.append(match.group(1))
    return direct, [f"{name}=={version}" for name, version in sorted(pinned.items())]


def build_wheelhouse(
    directory: Path,
    platforms: Sequence[str] = DEFAULT_PLATFORMS,
    python_versions: Sequence[str] = PYTHON_VERSIONS,
    *,
    jobs: int = DEFAULT_JOBS,
    progress: Callable[[str], None] = lambda line: None,
) -> WheelhouseReport:
    """Download the wheels of every platform and Python version into ``directory/<os>-<arch>/``.

    A platform is replaced only once at least one of its Python versions has all its wheels, so a failed run
    (offline, say) leaves what an earlier run built. Other platforms' folders are left alone.
    """
    unknown = sorted(set(platforms) - set(PLATFORMS))
    if unknown:
        raise WheelhouseError(f"unknown platform {', '.join(unknown)}; known: {', '.join(PLATFORMS)}")
    direct, constraints = pinned_requirements()
    started = time.monotonic()
    directory.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=".downloads-", dir=directory))
    try:
        (scratch / "constraints.txt").write_text("\n".join(constraints) + "\n")
        downloads: dict[str, list[DownloadResult]] = {name: [] for name in platforms}
        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            futures = [
                pool.submit(_download, PLATFORMS[name], version, direct, scratch)
                for name in platforms
                for version in python_versions
            ]
            for future in as_completed(futures):
                result = future.result()
                downloads[result.platform].append(result)
                progress(_describe(result))
        results = [_install_platform(directory, name, downloads[name], direct) for name in platforms]
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return WheelhouseReport(directory, results, time.monotonic() - started)


def _download(platform: Platform, python_version: str, direct: list[str], scratch: Path) -> DownloadResult:
    target = scratch / f"{platform.name}-{python_version}"
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--disable-pip-version-check",
        "--no-input",
        "--progress-bar=off",
        "--only-binary=:all:",
        "--implementation=cp",
        f"--python-version={python_version}",
        f"--abi=cp{python_version.replace('.', '')}",
        *(f"--platform={tag}" for tag in platform.pip_platforms),
        f"--constraint={scratch / 'constraints.txt'}",
        f"--dest={target}",
        *direct,
    ]
    started = time.monotonic()
    try:
        # The operator's pip configuration (index mirror, proxy, certificates) applies: it is their network.
        completed = subprocess.run(  # noqa: S603 - our own interpreter, fixed arguments
            command, capture_output=True, text=True, timeout=PIP_TIMEOUT, check=False
        )
    except subprocess.TimeoutExpired:
        return DownloadResult(platform.name, python_version, False, target, PIP_TIMEOUT, "pip download timed out")
    seconds = time.monotonic() - started
    if completed.returncode != 0:
        error = pip_failure(completed.stdout + completed.stderr)
        return DownloadResult(platform.name, python_version, False, target, seconds, error)
    return DownloadResult(platform.name, python_version, True, target, seconds)


def pip_failure(output: str) -> str:
    """One line saying why ``pip download`` failed, from its output."""
    trouble = _NETWORK_TROUBLE.search(output)
    if trouble:
        return f"could not reach the package index ({trouble.group(0)})"
    missing = re.search(r"no matching distributions? available for your environment:\s*\n((?:[ \t]+\S+\n?)+)", output)
    if missing:
        return "no wheels for " + ", ".join(missing.group(1).split())
    not_found = re.findall(r"No matching distribution found for (\S+)", output)
    if not_found:
        return "no wheels for " + ", ".join(not_found)
    if "No module named pip" in output:
        return f"pip is not installed in {sys.executable}'s environment"
    errors = [line.strip() for line in output.splitlines() if line.startswith("ERROR")]
    lines = errors or [line.strip() for line in output.splitlines() if line.strip()]
    return lines[-1] if lines else "pip download failed"


def _describe(result: DownloadResult) -> str:
    label = f"{result.platform} Python {result.python_version}"
    if not result.ok:
        return f"{label}: failed: {result.error}"
    wheels = list(result.directory.glob("*.whl"))
    size = sum(wheel.stat().st_size for wheel in wheels)
    return f"{label}: {len(wheels)} wheels, {size / 1e6:.1f} MB in {result.seconds:.1f} s"


def _install_platform(directory: Path, name: str, downloads: list[DownloadResult], direct: list[str]) -> PlatformResult:
    downloads = sorted(downloads, key=lambda d: tuple(map(int, d.python_version.split("."))))
    result = PlatformResult(name, errors={d.python_version: d.error for d in downloads if not d.ok})
    succeeded = [d for d in downloads if d.ok]
    if not succeeded:
        return result
    staging = directory / f".{name}.{uuid.uuid4().hex}"
    staging.mkdir()
    for download in succeeded:
        for wheel in download.directory.glob("*.whl"):
            # The same file name is the same pinned wheel, whichever Python version's download brought it.
            if not (staging / wheel.name).exists():
                os.replace(wheel, staging / wheel.name)
    (staging / REQUIREMENTS).write_text("\n".join(direct) + "\n")
    result.python_versions = [d.python_version for d in succeeded]
    (staging / VERSIONS_FILE).write_text(" ".join(result.python_versions) + "\n")
    wheels = list(staging.glob("*.whl"))
    result.wheels, result.size = len(wheels), sum(wheel.stat().st_size for wheel in wheels)
    final, retired = directory / name, directory / f".{name}.old.{uuid.uuid4().hex}"
    if final.exists():
        final.rename(retired)
    staging.rename(final)
    shutil.rmtree(retired, ignore_errors=True)
    return result
