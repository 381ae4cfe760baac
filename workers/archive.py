"""Template archives: safe extraction on the daemon, packing on the CLI.

A template archive comes from whoever may push templates, and the daemon unpacks it on a machine that may host
other teams' jobs, so extraction treats every entry as hostile: nothing may land outside the destination, no
special files are created, and sizes are counted on the bytes actually written, never on what headers claim.
"""

from __future__ import annotations

import io
import os
import stat
import tarfile
import tempfile
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO

MiB = 1024 * 1024
_CHUNK = 64 * 1024
_GZIP_MAGIC = b"\x1f\x8b"
# A zip starts with a local file header, or with the end-of-central-directory record when it is empty.
_ZIP_MAGICS = (b"PK\x03\x04", b"PK\x05\x06")

# `pack_directory` keeps this one hidden file: the provider lock pins versions and checksums.
_KEPT_HIDDEN = frozenset({".terraform.lock.hcl"})
_SKIPPED_SUFFIXES = (".tfstate", ".tfstate.backup")


class ArchiveError(ValueError):
    """The archive is not acceptable; the message names the offending entry."""


@dataclass(frozen=True)
class ArchiveLimits:
    max_file_size: int = 10 * MiB
    max_total_size: int = 100 * MiB
    max_entries: int = 10_000


def extract_archive(data: bytes, destination: Path, limits: ArchiveLimits | None = None) -> None:
    """Unpack a tar (plain or gzipped) or zip archive, recognised by its content, into `destination`."""
    limits = limits or ArchiveLimits()
    destination.mkdir(mode=0o700, parents=True, exist_ok=True)
    extractor = _Extractor(destination, limits)
    if data.startswith(_ZIP_MAGICS):
        extractor.extract_zip(data)
    elif data.startswith(_GZIP_MAGIC) or _looks_like_tar(data):
        extractor.extract_tar(data)
    else:
        raise ArchiveError("the template archive is not a tar, tar.gz or zip file")
    extractor.check_final_links()


def _looks_like_tar(data: bytes) -> bool:
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as archive:
            archive.next()
    except tarfile.TarError:
        return False
    return True


class _Extractor:
    def __init__(self, destination: Path, limits: ArchiveLimits) -> None:
        # Everything is checked against the real path, so a destination reached through a symlink still works.
        self.root = Path(os.path.realpath(destination))
        self.limits = limits
        self.entries = 0
        self.total = 0

    # -- formats ----------------------------------------------------------------------------------------------

    def extract_tar(self, data: bytes) -> None:
        try:
            # Stream mode ("r|*") reads strictly forward: gzip is decompressed on the fly and each member's data
            # is read once, while the member is current.
            with tarfile.open(fileobj=io.BytesIO(data), mode="r|*") as archive:
                for member in archive:
                    self._extract_tar_member(archive, member)
        except (tarfile.TarError, EOFError, OSError, zlib.error) as exc:
            raise ArchiveError(f"the template archive is corrupt: {exc}") from exc

    def _extract_tar_member(self, archive: tarfile.TarFile, member: tarfile.TarInfo) -> None:
        relative = self._admit(member.name)
        if relative is None:
            return
        name = member.name
        if member.isdir():
            self._make_dir(relative, name)
        elif member.isreg():
            if member.size > self.limits.max_file_size:
                raise self._too_big(name)
            source = archive.extractfile(member)
            if source is None:
                raise ArchiveError(f"{name!r}: cannot read the file's content")
            self._write_file(relative, name, source, executable=bool(member.mode & 0o111))
        elif member.issym():
            self._make_symlink(relative, name, member.linkname)
        elif member.islnk():
            self._copy_hard_link(relative, name, member.linkname)
        elif member.ischr() or member.isblk() or member.isfifo():
            raise ArchiveError(f"{name!r}: device and fifo files are not allowed")
        else:
            raise ArchiveError(f"{name!r}: unsupported tar entry type {member.type!r}")

    def extract_zip(self, data: bytes) -> None:
        try:
            with zipfile.ZipFile(io.BytesIO(data)) as archive:
                for info in archive.infolist():
                    self._extract_zip_member(archive, info)
        except (zipfile.BadZipFile, RuntimeError, EOFError, NotImplementedError, zlib.error) as exc:
            # RuntimeError: encrypted entries; NotImplementedError: an unknown compression method.
            raise ArchiveError(f"the template archive is corrupt or unsupported: {exc}") from exc

    def _extract_zip_member(self, archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> None:
        relative = self._admit(info.filename)
        if relative is None:
            return
        name = info.filename
        # Zips made on Unix keep st_mode in the high 16 bits of external_attr; others leave it 0.
        mode = info.external_attr >> 16
        if info.is_dir() or stat.S_ISDIR(mode):
            self._make_dir(relative, name)
        elif stat.S_ISLNK(mode):
            target = self._read_limited(archive.open(info), name, self.limits.max_file_size)
            self._make_symlink(relative, name, target.decode("utf-8", errors="replace"))
        elif stat.S_ISCHR(mode) or stat.S_ISBLK(mode) or stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
            raise ArchiveError(f"{name!r}: device and fifo files are not allowed")
        else:
            with archive.open(info) as source:
                self._write_file(relative, name, source, executable=bool(mode & 0o111))

    # -- checks -----------------------------------------------------------------------------------------------

    def _admit(self, name: str) -> PurePosixPath | None:
        """Count the entry and validate its name; None for the archive's own root ("./")."""
        self.entries += 1
        if self.entries > self.limits.max_entries:
            raise ArchiveError(f"{name!r}: the archive has more than {self.limits.max_entries} entries")
        if name.startswith("/") or (len(name) > 1 and name[1] == ":"):
            raise ArchiveError(f"{name!r}: absolute paths are not allowed")
        parts = [part for part in name.replace("\\", "/").split("/") if part not in ("", ".")]
        if ".." in parts:
            raise ArchiveError(f"{name!r}: '..' path components are not allowed")
        if not parts:
            return None
        return PurePosixPath(*parts)

    def _inside(self, path: str) -> bool:
        return path == str(self.root) or path.startswith(str(self.root) + os.sep)

    def _target_path(self, relative: PurePosixPath, name: str) -> Path:
        """Where the entry goes, refusing a parent that leads outside through a symlink made by an earlier entry."""
        parent = os.path.realpath(self.root.joinpath(*relative.parent.parts))
        if not self._inside(parent):
            raise ArchiveError(f"{name!r}: its parent directory leads outside the template through a symlink")
        return Path(parent) / relative.name

    def check_final_links(self) -> None:
        """Every symlink, judged by where it leads once the whole archive is out. Each was checked when it was made,
        but a later entry can change what an earlier link goes through: ``l1 -> l2/..`` is inside while ``l2`` does
        not exist, and leads out of the template once ``l2 -> .`` follows."""
        for directory, dirnames, filenames in os.walk(self.root):  # symlinked directories are listed, not entered
            for name in sorted(dirnames + filenames):
                path = os.path.join(directory, name)
                if os.path.islink(path) and not self._inside(os.path.realpath(path)):
                    member, target = os.path.relpath(path, self.root), os.readlink(path)
                    raise ArchiveError(
                        f"{member!r}: symlink leads outside the template through other symlinks ({target!r})"
                    )

    def _too_big(self, name: str) -> ArchiveError:
        return ArchiveError(f"{name!r}: file is larger than {self.limits.max_file_size} bytes")

    # -- writers ----------------------------------------------------------------------------------------------

    def _make_dir(self, relative: PurePosixPath, name: str) -> None:
        path = self._target_path(relative, name)
        try:
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            if path.is_symlink():
                raise ArchiveError(f"{name!r}: a directory entry replaces a symlink")
            path.mkdir(mode=0o700, exist_ok=True)
            path.chmod(0o700)
        except OSError as exc:
            raise ArchiveError(f"{name!r}: cannot create directory: {exc.strerror}") from exc

    def _write_file(self, relative: PurePosixPath, name: str, source: IO[bytes], *, executable: bool) -> None:
        path = self._target_path(relative, name)
        mode = 0o700 if executable else 0o600
        try:
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            # A later entry of the same name wins, as with tar itself; unlinking first also means we never
            # write through a symlink left there by an earlier entry.
            if path.is_symlink() or path.is_file():
                path.unlink()
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
        except OSError as exc:
            raise ArchiveError(f"{name!r}: cannot create file: {exc.strerror}") from exc
        with os.fdopen(fd, "wb") as target:
            os.fchmod(target.fileno(), mode)  # umask must not change the mode
            for chunk in self._chunks(source, name):
                target.write(chunk)

    def _chunks(self, source: IO[bytes], name: str) -> Iterator[bytes]:
        """Yield the content while counting real bytes against both limits (headers may lie: zip bombs)."""
        written = 0
        while chunk := source.read(_CHUNK):
            written += len(chunk)
            self.total += len(chunk)
            if written > self.limits.max_file_size:
                raise self._too_big(name)
            if self.total > self.limits.max_total_size:
                raise ArchiveError(f"{name!r}: the archive expands to more than {self.limits.max_total_size} bytes")
            yield chunk

    def _read_limited(self, source: IO[bytes], name: str, limit: int) -> bytes:
        with source:
            data = source.read(limit + 1)
        if len(data) > limit:
            raise self._too_big(name)
        return data

    def _make_symlink(self, relative: PurePosixPath, name: str, target: str) -> None:
        path = self._target_path(relative, name)
        if target.startswith("/"):
            raise ArchiveError(f"{name!r}: symlink to an absolute path ({target!r}) is not allowed")
        # realpath, not normpath: "b/../x" must be judged by where the symlink b really leads.
        resolved = os.path.realpath(os.path.join(path.parent, target))
        if not self._inside(resolved):
            raise ArchiveError(f"{name!r}: symlink points outside the template ({target!r})")
        try:
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            if path.is_symlink() or path.is_file():
                path.unlink()
            os.symlink(target, path)
        except OSError as exc:
            raise ArchiveError(f"{name!r}: cannot create symlink: {exc.strerror}") from exc

    def _copy_hard_link(self, relative: PurePosixPath, name: str, target: str) -> None:
        """A hard link becomes a copy of a file already extracted; a real link could tie us to a file outside."""
        target_relative = self._admit_link_target(name, target)
        source = os.path.realpath(self.root.joinpath(*target_relative.parts))
        if not self._inside(source):
            raise ArchiveError(f"{name!r}: hard link points outside the template ({target!r})")
        if not os.path.isfile(source):
            raise ArchiveError(f"{name!r}: hard link target {target!r} is not a file extracted earlier")
        executable = bool(os.stat(source).st_mode & 0o100)
        with open(source, "rb") as content:
            self._write_file(relative, name, content, executable=executable)

    def _admit_link_target(self, name: str, target: str) -> PurePosixPath:
        if target.startswith("/"):
            raise ArchiveError(f"{name!r}: hard link to an absolute path ({target!r}) is not allowed")
        parts = [part for part in target.split("/") if part not in ("", ".")]
        if ".." in parts or not parts:
            raise ArchiveError(f"{name!r}: hard link points outside the template ({target!r})")
        return PurePosixPath(*parts)


def pack_directory(path: Path) -> bytes:
    """A tar of a template directory, as `templates push` uploads it.

    Hidden files and directories (editor files, `.terraform/`, `.git/`) and local state files are left out:
    state belongs to workspace builds, never to the template. `.terraform.lock.hcl` is kept.
    """
    if not path.is_dir():
        raise ArchiveError(f"{str(path)!r} is not a directory")
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for file in _template_files(path):
            info = archive.gettarinfo(str(file), arcname=file.relative_to(path).as_posix())
            # Owner names and ids mean nothing on the daemon's machine.
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            if info.isreg():
                with file.open("rb") as content:
                    archive.addfile(info, content)
            else:
                archive.addfile(info)
    return buffer.getvalue()


def zip_directory(path: Path) -> bytes:
    """A zip of the files `pack_directory` takes (what `templates pull --zip` writes)."""
    if not path.is_dir():
        raise ArchiveError(f"{str(path)!r} is not a directory")
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for file in _template_files(path):
            archive.write(file, arcname=file.relative_to(path).as_posix())
    return buffer.getvalue()


def archive_as(data: bytes, kind: str) -> bytes:
    """``data`` (a tar, tar.gz or zip) as a plain ``"tar"`` or a ``"zip"``: as it is when it is one already, else
    unpacked (with the checks a daemon makes) and packed again."""
    is_zip = data.startswith(_ZIP_MAGICS)
    if (kind == "zip") == is_zip and not data.startswith(_GZIP_MAGIC):
        return data
    with tempfile.TemporaryDirectory(prefix="slipway-archive-") as scratch:
        extract_archive(data, Path(scratch) / "files")
        return zip_directory(Path(scratch) / "files") if kind == "zip" else pack_directory(Path(scratch) / "files")


def _template_files(root: Path) -> Iterator[Path]:
    for directory, dirnames, filenames in os.walk(root):
        # Sorted, in place, so the walk (and the archive) is deterministic and hidden dirs are never entered.
        here = Path(directory)
        visible = sorted(name for name in dirnames if not name.startswith("."))
        # os.walk does not descend into symlinked directories; they are packed as the symlinks they are.
        dirnames[:] = [name for name in visible if not (here / name).is_symlink()]
        if here != root:
            yield here
        for name in visible:
            if (here / name).is_symlink():
                yield here / name
        for name in sorted(filenames):
            if name.startswith(".") and name not in _KEPT_HIDDEN:
                continue
            if name.endswith(_SKIPPED_SUFFIXES):
                continue
            yield here / name
