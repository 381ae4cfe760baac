"""The agent bundles workspaces download (``GET /bin/slipway-agent-<os>-<arch>.tar.gz``): one platform's wheels
from the wheelhouse (built by `slipway agent-bundle`, ``cli/wheelhouse.py``) with the installed ``agent`` and
``protocol`` packages' source, packed into a deterministic ``.tar.gz`` cached in the data dir under a key of its
inputs."""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import io
import os
import tarfile
import uuid
from dataclasses import dataclass
from pathlib import Path

from app.core.version import server_version
from protocol.agent_bundle import AGENT_PACKAGES, BUNDLE_ROOT, REQUIREMENTS, VERSIONS_FILE

# Fixed time for every tar member, so the same inputs give the same bytes (and the same ETag) on every replica.
ARCHIVE_MTIME = 1_700_000_000


class BundleUnavailable(Exception):
    """No bundle can be served for a platform; ``status`` and ``message`` are the HTTP answer."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


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
    text = server_version()
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
    """The installed ``agent`` and ``protocol`` packages' files as (``agent/...``, path), without bytecode caches or
    dotfiles: the agent imports the protocol it shares with the server, so the bundle carries both."""
    files: dict[str, Path] = {}
    for package in AGENT_PACKAGES:
        spec = importlib.util.find_spec(package)
        for location in list(spec.submodule_search_locations or []) if spec else []:
            root = Path(location)
            for path in sorted(root.rglob("*")):
                parts = path.relative_to(root).parts
                if "__pycache__" in parts or any(part.startswith(".") for part in parts) or path.suffix == ".pyc":
                    continue
                if path.is_file() and not path.is_symlink():
                    files.setdefault("/".join((package, *parts)), path)
    if "agent/__main__.py" not in files or "protocol/__init__.py" not in files:
        raise BundleUnavailable(503, "This Slipway installation has no workspace agent to serve (agent/, protocol/).")
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
