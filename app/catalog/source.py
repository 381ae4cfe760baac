"""A template version's source, read from its stored archive in memory (never unpacked to disk): its files, one
file highlighted (Pygments, with CSS classes: the strict CSP allows no inline style), and a unified diff between
two versions (difflib). Binary and very large files are named with their size, not shown."""

from __future__ import annotations

import difflib
import io
import tarfile
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Protocol, TypeVar

from markupsafe import Markup, escape
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import TextLexer, get_lexer_for_filename
from pygments.util import ClassNotFound

from app.core.errors import Conflict
from app.files.services import archive_bytes

# Shown as text up to this size; larger files are listed with their size only.
MAX_SHOWN_BYTES = 256 * 1024
# An archive's entries read at most (a template has a handful of files).
MAX_ENTRIES = 2_000
_ZIP_MAGICS = (b"PK\x03\x04", b"PK\x05\x06")
_FORMATTER = HtmlFormatter(cssclass="source-code", wrapcode=True)


class _Identified(Protocol):
    @property
    def id(self) -> str: ...


V = TypeVar("V", bound=_Identified)


@dataclass(frozen=True)
class SourceFile:
    path: str
    size: int
    # None: binary, or larger than MAX_SHOWN_BYTES.
    text: str | None

    @property
    def summary(self) -> str:
        kind = "binary" if self.size <= MAX_SHOWN_BYTES else "too large to show"
        return f"{kind}, {self.size} bytes"


def _clean_path(name: str) -> str | None:
    """The entry's path as shown, or None for one that names no file inside the archive."""
    parts = [part for part in PurePosixPath(name.replace("\\", "/")).parts if part not in ("", ".", "/")]
    if not parts or ".." in parts:
        return None
    return "/".join(parts)


def _as_text(data: bytes, size: int) -> str | None:
    if size > MAX_SHOWN_BYTES or b"\x00" in data[:8192]:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def read_source(data: bytes) -> dict[str, SourceFile]:
    """The regular files of a tar (plain or gzipped) or zip archive, by path, read in memory."""
    files: dict[str, SourceFile] = {}
    try:
        if data.startswith(_ZIP_MAGICS):
            with zipfile.ZipFile(io.BytesIO(data)) as archive:
                for info in archive.infolist()[:MAX_ENTRIES]:
                    path = _clean_path(info.filename)
                    if info.is_dir() or path is None:
                        continue
                    body = archive.read(info) if info.file_size <= MAX_SHOWN_BYTES else b""
                    files[path] = SourceFile(path, info.file_size, _as_text(body, info.file_size))
        else:
            with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as archive:
                for count, member in enumerate(archive):
                    if count >= MAX_ENTRIES:
                        break
                    path = _clean_path(member.name)
                    if not member.isfile() or path is None:
                        continue
                    extracted = archive.extractfile(member) if member.size <= MAX_SHOWN_BYTES else None
                    body = extracted.read(MAX_SHOWN_BYTES + 1) if extracted is not None else b""
                    files[path] = SourceFile(path, member.size, _as_text(body, member.size))
    except (tarfile.TarError, zipfile.BadZipFile, EOFError, OSError) as exc:
        raise Conflict(f"The version's archive cannot be read: {exc}") from exc
    return dict(sorted(files.items()))


def version_source(file_id: str) -> dict[str, SourceFile]:
    return read_source(archive_bytes(file_id))


def highlighted(source: SourceFile) -> Markup:
    """The file as HTML with Pygments' classes (styled by slipway.css)."""
    try:
        lexer = get_lexer_for_filename(source.path, stripnl=False)
    except ClassNotFound:
        lexer = TextLexer(stripnl=False)
    return Markup(highlight(source.text or "", lexer, _FORMATTER))  # noqa: S704 - Pygments escapes the text


@dataclass(frozen=True)
class FileDiff:
    path: str
    # "added", "removed", "changed", or "binary" (changed, not shown)
    change: str
    html: Markup


def _diff_html(lines: list[str]) -> Markup:
    rows = []
    for line in lines:
        kind = "hunk" if line.startswith("@@") else {"+": "add", "-": "del"}.get(line[:1], "same")
        if line.startswith(("+++", "---")):
            kind = "head"
        rows.append(f'<span class="diff-{kind}">{escape(line.rstrip(chr(10)))}</span>')
    # Each line is a block of its own, so no newline joins them (one would show as an empty line).
    return Markup('<pre class="diff">' + "".join(rows) + "</pre>")  # noqa: S704 - every line is escaped


def diff_versions(
    old: dict[str, SourceFile], new: dict[str, SourceFile], old_name: str, new_name: str
) -> list[FileDiff]:
    """The files that differ between two versions, each with its unified diff."""
    diffs = []
    for path in sorted(set(old) | set(new)):
        before, after = old.get(path), new.get(path)
        if before is not None and after is not None and before == after:
            continue
        change = "added" if before is None else "removed" if after is None else "changed"
        if (before is not None and before.text is None) or (after is not None and after.text is None):
            sizes = " → ".join(item.summary for item in (before, after) if item is not None)
            diffs.append(FileDiff(path, "binary", Markup('<p class="muted small">{}</p>').format(sizes)))
            continue
        lines = difflib.unified_diff(
            ((before.text or "") if before else "").splitlines(keepends=True),
            ((after.text or "") if after else "").splitlines(keepends=True),
            fromfile=f"{old_name}/{path}" if before else "/dev/null",
            tofile=f"{new_name}/{path}" if after else "/dev/null",
        )
        diffs.append(FileDiff(path, change, _diff_html(list(lines))))
    return diffs


def compared_versions(
    versions: Sequence[V], active_id: str | None, picked_old: V | None, picked_new: V | None
) -> tuple[V | None, V | None]:
    """Which two versions Compare shows: those picked, else the active version (or the newest) as "to" and the
    newest *other* version as "from". The old default took only an older one, so with the active version the
    oldest there was no "from" at all, and the page read " and v1 have the same files."."""
    new = picked_new or next((item for item in versions if item.id == active_id), None)
    new = new or (versions[0] if versions else None)
    others = [item for item in versions if new is None or item.id != new.id]
    return picked_old or (others[0] if others else None), new
