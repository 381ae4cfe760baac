"""Prepared ``terraform init`` results, reused by later jobs of the same template (Coder #13691: every build
re-downloads modules and re-resolves providers).

After a job's ``terraform init`` succeeds, its ``.terraform/`` directory and lock file are copied into an entry named
after everything init depends on: the template's files (the lock file among them), the Terraform that ran it and
the coder provider the daemon installed. A later job of the same files copies the entry into its own fresh work dir
and skips init. Entries are never changed once published (built aside, then renamed into place), so concurrent
jobs only ever read them; each job gets its own copy to run in.

Providers inside ``.terraform/`` are symlinks into the shared plugin cache, so an entry is small (modules are real
files). Each entry lists every file with its SHA-256 (and every link with its target); restoring checks them while
copying, and a mismatch, a missing file or a dangling link makes the entry count as corrupt: it is removed and the
job runs ``terraform init`` as if there had been no entry, saying so in its log. The cache lives under the daemon's
cache dir, so it survives restarts; its size is capped, the least recently used entries going first, and an
entry older than a day is made again (so that version ranges pick up new releases).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from protocol.logs import STAGE_SETUP, LogLevel, LogLine

log = logging.getLogger(__name__)

DOT_TERRAFORM = ".terraform"
LOCK_FILE = ".terraform.lock.hcl"
MANIFEST = "manifest.json"
DEFAULT_MAX_BYTES = 1 << 30
# Modules and providers chosen by a version range (`~> 1.0`) are resolved again this often, as a fresh
# `terraform init` would on every run: an entry this old is replaced rather than reused.
MAX_AGE_SECONDS = 24 * 3600
# Half-built or half-removed entries older than this are left over from a daemon that died: removed on the next store.
_LEFTOVER_SECONDS = 600
_CHUNK = 1 << 20

LogCallback = Callable[[LogLine], None]


class CorruptEntryError(Exception):
    pass


class _Expired(Exception):
    pass


def _file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _walk(root: Path) -> Iterator[Path]:
    """Every file and symlink under ``root`` (links are not followed), in a stable order."""
    for directory, subdirs, files in os.walk(root):
        subdirs.sort()
        here = Path(directory)
        for name in sorted(files):
            yield here / name
        for name in subdirs:  # os.walk lists a link to a directory among the directories
            if (here / name).is_symlink():
                yield here / name


def template_digest(workdir: Path) -> str:
    """The SHA-256 of a freshly extracted template: every path and file content (the lock file included)."""
    digest = hashlib.sha256()
    for path in _walk(workdir):
        relative = path.relative_to(workdir).as_posix()
        if relative.split("/")[0] == DOT_TERRAFORM:  # a template may not ship its own: init's output is keyed
            continue
        digest.update(relative.encode() + b"\0")
        digest.update(("link:" + os.readlink(path)).encode() if path.is_symlink() else _file_digest(path).encode())
        digest.update(b"\0")
    return digest.hexdigest()


@dataclass(frozen=True)
class _Stored:
    key: str
    path: Path
    size: int
    last_used: float


@dataclass(frozen=True)
class CachedInit:
    """The entry one job may use: what the executor runs instead of, or after, ``terraform init``."""

    cache: InitCache
    key: str

    def restore(self, workdir: Path, job_log: LogCallback) -> bool:
        return self.cache.restore(self.key, workdir, job_log)

    def store(self, workdir: Path) -> None:
        self.cache.store(self.key, workdir)


class InitCache:
    """The entries under ``root`` (``<cache dir>/init-cache``), at most ``max_bytes`` of them (0 disables)."""

    def __init__(self, root: Path, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.root = root
        self.max_bytes = max_bytes

    @property
    def enabled(self) -> bool:
        return self.max_bytes > 0

    def key(self, workdir: Path, toolchain: str) -> str:
        """The entry a job in ``workdir`` may use: its template's files and the Terraform and providers
        (``toolchain``) that run init."""
        return hashlib.sha256(f"{template_digest(workdir)}\0{toolchain}".encode()).hexdigest()

    # -- restoring ---------------------------------------------------------------------------------------------

    def restore(self, key: str, workdir: Path, job_log: LogCallback) -> bool:
        """Copy entry ``key`` into ``workdir``; False (nothing copied) when there is none or it cannot be used."""
        entry = self.root / key
        manifest_path = entry / MANIFEST
        if not manifest_path.is_file():
            _say(job_log, "info", "No prepared terraform init of this template here yet: running terraform init "
                 "(kept for the next job).")  # fmt: skip
            return False
        try:
            self._copy_out(entry, workdir)
        except _Expired:
            self._discard_copy(workdir)
            self._remove(entry)
            _say(job_log, "info", "The prepared terraform init of this template is over a day old: running "
                 "terraform init again (new module and provider releases are picked up).")  # fmt: skip
            return False
        except (CorruptEntryError, ValueError, KeyError, TypeError) as exc:
            self._discard_copy(workdir)
            self._remove(entry)
            _say(job_log, "warn", f"The prepared init of this template was damaged ({exc}); it was removed and "
                 "terraform init runs instead.")  # fmt: skip
            return False
        except OSError as exc:  # deleted under us (another daemon evicted it, or someone cleaned the cache dir)
            self._discard_copy(workdir)
            _say(job_log, "warn", f"The prepared init of this template could not be copied ({exc.strerror or exc}); "
                 "terraform init runs instead.")  # fmt: skip
            return False
        try:
            os.utime(manifest_path)  # last used: what eviction goes by
        except OSError:
            pass
        _say(job_log, "info", f"Reusing the prepared terraform init of this template (cache entry {key[:12]}).")
        return True

    def _copy_out(self, entry: Path, workdir: Path) -> None:
        manifest = json.loads((entry / MANIFEST).read_text())
        if time.time() - float(manifest["created"]) > MAX_AGE_SECONDS:
            raise _Expired
        files: dict[str, str] = manifest["files"]
        for relative, expected in files.items():
            if relative.startswith("/") or ".." in relative.split("/"):
                raise CorruptEntryError(f"the entry names {relative!r}")
            source, target = entry / relative, workdir / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            if expected.startswith("link:"):
                pointed = expected.removeprefix("link:")
                if not source.is_symlink() or os.readlink(source) != pointed:
                    raise CorruptEntryError(f"{relative} is not the link it was")
                if not Path(pointed).exists():
                    raise CorruptEntryError(f"{relative} points at {pointed}, which is gone")
                target.symlink_to(pointed)
            elif _copy_hashing(source, target) != expected:
                raise CorruptEntryError(f"{relative} changed")

    def _discard_copy(self, workdir: Path) -> None:
        shutil.rmtree(workdir / DOT_TERRAFORM, ignore_errors=True)

    # -- storing -----------------------------------------------------------------------------------------------

    def store(self, key: str, workdir: Path) -> None:
        """Publish the result of an init that just succeeded in ``workdir``, then keep the cache under its cap.
        Best effort: a cache that cannot be written never fails the job."""
        if (self.root / key / MANIFEST).is_file():
            return
        building = self.root / f".tmp-{uuid.uuid4().hex}"
        try:
            building.mkdir(parents=True, mode=0o700)
            files, size = {}, 0
            sources = list(_walk(workdir / DOT_TERRAFORM))
            if (workdir / LOCK_FILE).is_file():
                sources.append(workdir / LOCK_FILE)
            for source in sources:
                relative = source.relative_to(workdir).as_posix()
                target = building / relative
                target.parent.mkdir(parents=True, exist_ok=True)
                if source.is_symlink():
                    # Absolute, so that the entry does not depend on where the job's work dir was.
                    pointed = str((source.parent / os.readlink(source)).resolve())
                    target.symlink_to(pointed)
                    files[relative] = "link:" + pointed
                else:
                    files[relative] = _copy_hashing(source, target)
                    size += source.stat().st_size
            if size > self.max_bytes:
                log.info("init cache: an entry of %d bytes exceeds the cap of %d; not kept", size, self.max_bytes)
                self._remove(building)
                return
            (building / MANIFEST).write_text(json.dumps({"files": files, "size": size, "created": time.time()}))
            try:
                building.rename(self.root / key)
            except OSError:  # another daemon published the same entry first
                self._remove(building)
            self._evict(keep=key)
        except OSError:
            log.warning("init cache: could not store an entry", exc_info=True)
            self._remove(building)

    def entries(self) -> list[_Stored]:
        """Published entries, least recently used first."""
        found = []
        for path in self.root.iterdir() if self.root.is_dir() else ():
            if path.name.startswith("."):
                continue
            try:
                manifest = path / MANIFEST
                size = int(json.loads(manifest.read_text()).get("size", 0))
                found.append(_Stored(path.name, path, size, manifest.stat().st_mtime))
            except (OSError, ValueError, AttributeError):
                found.append(_Stored(path.name, path, 0, 0.0))  # unreadable: the first to go
        return sorted(found, key=lambda stored: stored.last_used)

    def _evict(self, keep: str) -> None:
        stored = self.entries()
        total = sum(entry.size for entry in stored)
        for entry in stored:
            if total <= self.max_bytes:
                break
            if entry.key != keep:
                self._remove(entry.path)
                total -= entry.size
        now = time.time()
        for path in self.root.iterdir():
            if path.name.startswith((".tmp-", ".trash-")):
                try:
                    if now - path.stat().st_mtime > _LEFTOVER_SECONDS:
                        shutil.rmtree(path, ignore_errors=True)
                except OSError:
                    pass

    def _remove(self, path: Path) -> None:
        """Rename aside first (one atomic step for readers), then delete."""
        trash = self.root / f".trash-{uuid.uuid4().hex}"
        try:
            path.rename(trash)
        except OSError:
            trash = path
        shutil.rmtree(trash, ignore_errors=True)


def _copy_hashing(source: Path, target: Path) -> str:
    """Copy one file (mode bits too) and return the SHA-256 of what was copied."""
    digest = hashlib.sha256()
    with source.open("rb") as reader, target.open("wb") as writer:
        while chunk := reader.read(_CHUNK):
            digest.update(chunk)
            writer.write(chunk)
    shutil.copymode(source, target)
    return digest.hexdigest()


def _say(job_log: LogCallback, level: LogLevel, text: str) -> None:
    job_log(LogLine(level=level, stage=STAGE_SETUP, output=text, source="provisioner_daemon"))
