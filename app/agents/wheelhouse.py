"""The agent's offline bundle: a wheelhouse built ahead of time, and the tarballs workspaces download from it.

:func:`build_wheelhouse` runs ``pip download`` once per platform and Python version, concurrently, for the agent's
dependencies pinned to the versions this server itself runs with, into ``<wheelhouse>/<os>-<arch>/``. That is the
only step that needs PyPI. :func:`agent_bundle` then packs one platform's wheels with the installed ``agent``
package's source into a deterministic ``.tar.gz``, cached in the data dir under a key of its inputs.
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, distribution, version
from pathlib import Path

AGENT_DEPENDENCIES = ("asyncssh", "websockets", "httpx")
PYTHON_VERSIONS = ("3.11", "3.12", "3.13")
BUNDLE_ROOT = "slipway-agent"
REQUIREMENTS = "requirements.txt"
VERSIONS_FILE = "python-versions.txt"
# One pip download per platform and Python version; PyPI and a mirror both cope with this many at once.
DEFAULT_JOBS = 8
PIP_TIMEOUT = 900
# Fixed time for every tar member, so the same inputs give the same bytes (and the same ETag) on every replica.
ARCHIVE_MTIME = 1_700_000_000
_NETWORK_TROUBLE = re.compile(
    r"NewConnectionError|Max retries exceeded|Temporary failure in name resolution|Network is unreachable|"
    r"Could not fetch URL|ConnectTimeout|ProxyError|SSLError"
)


class WheelhouseError(Exception):
    """The wheelhouse cannot be built at all (the message is for the operator)."""


class BundleUnavailable(Exception):
    """No bundle can be served for a platform; ``status`` and ``message`` are the HTTP answer."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class Platform:
    os: str
    arch: str
    # pip's --platform values, most preferred first.
    pip_platforms: tuple[str, ...]

    @property
    def name(self) -> str:
        return f"{self.os}-{self.arch}"


def _manylinux(arch: str) -> tuple[str, ...]:
    # pip prefers earlier tags: the oldest glibc first, so each wheel runs on as many distributions as it can, and
    # newer tags only for packages that ship nothing older.
    return (f"manylinux2014_{arch}", *(f"manylinux_2_{minor}_{arch}" for minor in range(17, 40)))


PLATFORMS: dict[str, Platform] = {
    platform.name: platform
    for platform in (
        Platform("linux", "amd64", _manylinux("x86_64")),
        Platform("linux", "arm64", _manylinux("aarch64")),
        Platform("linux", "armv7", _manylinux("armv7l")),
        # pip widens a macOS tag to every older macOS release and to universal2 wheels.
        Platform("darwin", "amd64", ("macosx_11_0_x86_64",)),
        Platform("darwin", "arm64", ("macosx_11_0_arm64",)),
        Platform("windows", "amd64", ("win_amd64",)),
        Platform("windows", "arm64", ("win_arm64",)),
    )
}
# Windows workspaces are rare enough to be built on request (`slipway agent-bundle --platform windows-amd64`).
DEFAULT_PLATFORMS = tuple(name for name in PLATFORMS if not name.startswith("windows"))


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


@dataclass(frozen=True)
class Bundle:
    path: Path
    sha256: str  # hex digest of the tarball


def agent_bundle(wheelhouse: Path, platform: str, cache_dir: Path) -> Bundle:
    """The tarball for ``platform`` (``os-arch``), built on first use and cached under a key of its inputs.

    Raises :class:`BundleUnavailable` (404) when the wheelhouse has nothing for the platform, or (503) when this
    installation has no agent code to ship.
    """
    cache_dir.mkdir(parents=True, exist_ok=True)
    members = [*_bundle_members(wheelhouse, platform), ("agent/VERSION", _version_file(cache_dir))]
    key = hashlib.sha256(b"slipway-agent-bundle 1\0")
    for name, path in members:
        stat = path.stat()
        key.update(f"{name}\0{stat.st_size}\0{stat.st_mtime_ns}\0".encode())
    stem = f"slipway-agent-{platform}-{key.hexdigest()[:32]}"
    tarball, digest_file = cache_dir / f"{stem}.tar.gz", cache_dir / f"{stem}.sha256"
    if tarball.exists() and digest_file.exists():
        return Bundle(tarball, digest_file.read_text().strip())
    digest = _write_tarball(tarball, digest_file, members)
    for stale in cache_dir.glob(f"slipway-agent-{platform}-*"):
        if not stale.name.startswith(stem):
            stale.unlink(missing_ok=True)
    return Bundle(tarball, digest)


def _version_file(cache_dir: Path) -> Path:
    """The server's version for the agent to report: the bundle carries the agent's code, not Slipway's metadata."""
    try:
        text = version("slipway")
    except PackageNotFoundError:
        text = "0.0.0+unknown"
    path = cache_dir / "agent-version.txt"
    if not path.is_file() or path.read_text() != text:
        path.write_text(text)
    return path


def _bundle_members(wheelhouse: Path, platform: str) -> list[tuple[str, Path]]:
    """(name inside the bundle folder, file) of everything the bundle holds, in archive order."""
    source = wheelhouse / platform
    wheels = sorted(source.glob("*.whl")) if source.is_dir() else []
    if not wheels or not (source / REQUIREMENTS).is_file() or not (source / VERSIONS_FILE).is_file():
        os_name, _, arch = platform.partition("-")
        raise BundleUnavailable(
            404,
            f"This Slipway server has no agent bundle for {os_name}/{arch}: the wheels of the agent's dependencies "
            f"were not built for it. An administrator builds them with `slipway agent-bundle --platform {platform}` "
            "(or `make agent-bundle` in a source checkout) where PyPI is reachable, once per server upgrade.",
        )
    return [
        (REQUIREMENTS, source / REQUIREMENTS),
        (VERSIONS_FILE, source / VERSIONS_FILE),
        *((f"wheels/{wheel.name}", wheel) for wheel in wheels),
        *agent_source_files(),
    ]


def agent_source_files() -> list[tuple[str, Path]]:
    """The installed ``agent`` package's files as (``agent/...``, path), without bytecode caches or dotfiles."""
    spec = importlib.util.find_spec("agent")
    locations = list(spec.submodule_search_locations or []) if spec else []
    files: dict[str, Path] = {}
    for location in locations:
        root = Path(location)
        for path in sorted(root.rglob("*")):
            parts = path.relative_to(root).parts
            if "__pycache__" in parts or any(part.startswith(".") for part in parts) or path.suffix == ".pyc":
                continue
            if path.is_file() and not path.is_symlink():
                files.setdefault("/".join(("agent", *parts)), path)
    if "agent/__main__.py" not in files:
        raise BundleUnavailable(503, "This Slipway installation has no workspace agent to serve (agent/__main__.py).")
    return sorted(files.items())


def _write_tarball(tarball: Path, digest_file: Path, members: list[tuple[str, Path]]) -> str:
    sums = "".join(f"{_sha256_file(path)}  {name}\n" for name, path in members).encode()
    temporary = tarball.with_name(f".{tarball.name}.{uuid.uuid4().hex}")
    try:
        with temporary.open("wb") as raw:
            # Wheels are zip files already: the lowest level gains as much and costs a fraction of the time.
            with gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=1, mtime=0) as compressed:
                with tarfile.open(fileobj=compressed, mode="w", format=tarfile.PAX_FORMAT) as archive:
                    _add(archive, "SHA256SUMS", len(sums), io.BytesIO(sums))
                    for name, path in members:
                        with path.open("rb") as content:
                            _add(archive, name, path.stat().st_size, content)
        digest = _sha256_file(temporary)
        # The digest lands first: a reader that finds the tarball always finds its digest.
        digest_temporary = digest_file.with_name(f".{digest_file.name}.{uuid.uuid4().hex}")
        digest_temporary.write_text(digest + "\n")
        os.replace(digest_temporary, digest_file)
        os.replace(temporary, tarball)
    finally:
        temporary.unlink(missing_ok=True)
    return digest


def _add(archive: tarfile.TarFile, name: str, size: int, content: io.BufferedIOBase | io.BytesIO) -> None:
    info = tarfile.TarInfo(f"{BUNDLE_ROOT}/{name}")
    info.size, info.mtime, info.mode = size, ARCHIVE_MTIME, 0o644
    archive.addfile(info, content)


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
