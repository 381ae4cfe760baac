"""Template archive extraction refuses everything that could escape or exhaust the work dir; packing skips noise."""

from __future__ import annotations

import dataclasses
import gzip
import io
import stat
import tarfile
import zipfile
from pathlib import Path

import pytest

from workers.archive import ArchiveError, ArchiveLimits, archive_as, extract_archive, pack_directory

MiB = 1024 * 1024


def tar_bytes(*members: tuple[tarfile.TarInfo, bytes | None]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for info, data in members:
            if data is not None:
                info.size = len(data)
                archive.addfile(info, io.BytesIO(data))
            else:
                archive.addfile(info)
    return buffer.getvalue()


def file_member(name: str, data: bytes = b"x", mode: int = 0o644) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.mode = mode
    return info, data


def special_member(name: str, kind: bytes, linkname: str = "") -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = linkname
    return info, None


def zip_bytes(*entries: tuple[str, bytes, int]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data, mode in entries:
            info = zipfile.ZipInfo(name)
            info.external_attr = mode << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, data)
    return buffer.getvalue()


@pytest.fixture
def dest(tmp_path: Path) -> Path:
    return tmp_path / "work"


def refuse(data: bytes, dest: Path, entry: str, limits: ArchiveLimits | None = None) -> str:
    with pytest.raises(ArchiveError) as caught:
        extract_archive(data, dest, limits)
    message = str(caught.value)
    assert entry in message
    return message


# -- refusals, one each ------------------------------------------------------------------------------------------


def test_absolute_path_is_refused(dest: Path) -> None:
    assert "absolute" in refuse(tar_bytes(file_member("/etc/evil")), dest, "/etc/evil")


def test_dot_dot_component_is_refused(dest: Path, tmp_path: Path) -> None:
    assert "'..'" in refuse(tar_bytes(file_member("sub/../../evil")), dest, "sub/../../evil")
    assert not (tmp_path / "evil").exists()


def test_symlink_pointing_outside_is_refused(dest: Path) -> None:
    data = tar_bytes(special_member("link", tarfile.SYMTYPE, "../../etc"))
    assert "outside" in refuse(data, dest, "'link'")


def test_symlink_to_absolute_path_is_refused(dest: Path) -> None:
    data = tar_bytes(special_member("passwd", tarfile.SYMTYPE, "/etc/passwd"))
    assert "absolute" in refuse(data, dest, "'passwd'")


def test_symlink_reached_through_an_inside_symlink_cannot_escape(dest: Path) -> None:
    # sub/up -> .. is harmless on its own (it is the root), but "sub/up/escape -> ../outside" would land one
    # level above the root: the check must use where the link really is, not where its name says.
    data = tar_bytes(
        special_member("sub", tarfile.DIRTYPE),
        special_member("sub/up", tarfile.SYMTYPE, ".."),
        special_member("sub/up/escape", tarfile.SYMTYPE, "../outside"),
    )
    refuse(data, dest, "sub/up/escape")


def test_symlink_whose_target_climbs_through_another_symlink_cannot_escape(dest: Path) -> None:
    # "sub/c -> up/../x" looks inside when read as text (sub/x), but up is the root, so it really means ../x.
    data = tar_bytes(
        special_member("sub", tarfile.DIRTYPE),
        special_member("sub/up", tarfile.SYMTYPE, ".."),
        special_member("sub/c", tarfile.SYMTYPE, "up/../x"),
    )
    assert "outside" in refuse(data, dest, "'sub/c'")


# Chains: each link is inside when it is made, and a later entry changes what it goes through. Only where every
# link finally leads, once the whole archive is out, tells.
CHAINS = {
    "a later link makes an earlier one climb out": [("l1", "l2/.."), ("l2", ".")],
    "two hops made later": [("l1", "l2/.."), ("l2", "l3"), ("l3", ".")],
    "from a subdirectory": [("sub/l1", "../l2/.."), ("l2", ".")],
    "through a chain of directory links": [("l1", "l2/l3/../.."), ("l2", "sub"), ("sub/l3", "..")],
}


@pytest.mark.parametrize("chain", CHAINS.values(), ids=CHAINS.keys())
def test_symlink_chains_that_end_outside_are_refused(dest: Path, chain: list[tuple[str, str]]) -> None:
    members = [special_member("sub", tarfile.DIRTYPE)]
    members += [special_member(name, tarfile.SYMTYPE, target) for name, target in chain]
    message = refuse(tar_bytes(*members), dest, f"'{chain[0][0]}'")
    assert "leads outside the template" in message and repr(chain[0][1]) in message


def test_a_file_replaced_by_a_link_cannot_make_an_earlier_link_climb_out(dest: Path) -> None:
    # While l2 is a plain file, "l2/.." is the root; once a later entry of the same name makes l2 a link to ".",
    # it is the root's parent.
    data = tar_bytes(
        file_member("l2"), special_member("l1", tarfile.SYMTYPE, "l2/.."), special_member("l2", tarfile.SYMTYPE, ".")
    )
    refuse(data, dest, "'l1'")


def test_zip_symlink_chains_that_end_outside_are_refused(dest: Path) -> None:
    link = stat.S_IFLNK | 0o777
    refuse(zip_bytes(("l1", b"l2/..", link), ("l2", b".", link)), dest, "'l1'")


def test_symlink_chains_that_stay_inside_are_kept(dest: Path) -> None:
    data = tar_bytes(
        special_member("sub", tarfile.DIRTYPE),
        file_member("sub/main.tf", b"# here"),
        special_member("l1", tarfile.SYMTYPE, "l2/main.tf"),
        special_member("l2", tarfile.SYMTYPE, "l3"),
        special_member("l3", tarfile.SYMTYPE, "sub"),
        special_member("up", tarfile.SYMTYPE, "sub/.."),
    )
    extract_archive(data, dest)
    assert (dest / "l1").read_bytes() == b"# here" and (dest / "up").resolve() == dest.resolve()


def test_hard_link_to_outside_is_refused(dest: Path) -> None:
    data = tar_bytes(special_member("shadow", tarfile.LNKTYPE, "/etc/shadow"))
    assert "hard link" in refuse(data, dest, "'shadow'")


def test_hard_link_climbing_out_is_refused(dest: Path) -> None:
    data = tar_bytes(special_member("shadow", tarfile.LNKTYPE, "../outside"))
    assert "outside" in refuse(data, dest, "'shadow'")


def test_character_device_is_refused(dest: Path) -> None:
    assert "device" in refuse(tar_bytes(special_member("null", tarfile.CHRTYPE)), dest, "'null'")


def test_block_device_is_refused(dest: Path) -> None:
    assert "device" in refuse(tar_bytes(special_member("sda", tarfile.BLKTYPE)), dest, "'sda'")


def test_fifo_is_refused(dest: Path) -> None:
    assert "fifo" in refuse(tar_bytes(special_member("pipe", tarfile.FIFOTYPE)), dest, "'pipe'")


def test_file_over_ten_mebibytes_is_refused(dest: Path) -> None:
    data = tar_bytes(file_member("ok.tf", b"a"), file_member("big.bin", b"\0" * (10 * MiB + 1)))
    assert "larger than" in refuse(data, dest, "big.bin")
    assert not (dest / "big.bin").exists()


def test_zip_bomb_is_refused_by_counting_real_bytes(dest: Path) -> None:
    # 11 MiB of zeros deflate to ~11 KiB: only the decompressed byte count reveals it.
    data = zip_bytes(("bomb.bin", b"\0" * (11 * MiB), 0o644))
    assert len(data) < 100_000
    assert "larger than" in refuse(data, dest, "bomb.bin")


def test_total_size_over_the_limit_is_refused(dest: Path) -> None:
    limits = ArchiveLimits(max_file_size=1000, max_total_size=1500)
    data = tar_bytes(file_member("one", b"1" * 800), file_member("two", b"2" * 800))
    assert "expands to more than 1500 bytes" in refuse(data, dest, "'two'", limits)


def test_more_than_ten_thousand_entries_are_refused(dest: Path) -> None:
    data = tar_bytes(*(file_member(f"f{index}", b"") for index in range(10_001)))
    assert "more than 10000 entries" in refuse(data, dest, "f10000")


def test_data_that_is_not_an_archive_is_refused(dest: Path) -> None:
    with pytest.raises(ArchiveError, match="not a tar, tar.gz or zip"):
        extract_archive(b'resource "terraform_data" "x" {}\n' * 40, dest)


def test_empty_upload_is_refused(dest: Path) -> None:
    with pytest.raises(ArchiveError, match="not a tar, tar.gz or zip"):
        extract_archive(b"", dest)


def test_corrupt_gzip_is_refused(dest: Path) -> None:
    data = gzip.compress(tar_bytes(file_member("main.tf", b"x" * 5000)))
    with pytest.raises(ArchiveError, match="corrupt"):
        extract_archive(data[:40] + b"\xff" * 40 + data[80:], dest)


def test_zip_entry_climbing_out_is_refused(dest: Path) -> None:
    refuse(zip_bytes(("../evil.sh", b"x", 0o644)), dest, "../evil.sh")


def test_zip_symlink_pointing_outside_is_refused(dest: Path) -> None:
    refuse(zip_bytes(("link", b"../../etc/passwd", stat.S_IFLNK | 0o777)), dest, "'link'")


def test_zip_fifo_is_refused(dest: Path) -> None:
    refuse(zip_bytes(("pipe", b"", stat.S_IFIFO | 0o644)), dest, "'pipe'")


def test_limits_default_to_coder_caps_and_are_frozen() -> None:
    limits = ArchiveLimits()
    assert (limits.max_file_size, limits.max_total_size, limits.max_entries) == (10 * MiB, 100 * MiB, 10_000)
    with pytest.raises(dataclasses.FrozenInstanceError):
        limits.max_entries = 1  # type: ignore[misc]


# -- accepted archives -------------------------------------------------------------------------------------------


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def test_tar_extracts_files_dirs_and_inside_links_with_private_modes(dest: Path) -> None:
    data = tar_bytes(
        special_member("./", tarfile.DIRTYPE),
        file_member("./main.tf", b'resource "terraform_data" "x" {}\n', 0o666),
        file_member("scripts/start.sh", b"#!/bin/sh\n", 0o755),
        special_member("scripts/again.sh", tarfile.LNKTYPE, "scripts/start.sh"),
        special_member("start", tarfile.SYMTYPE, "scripts/start.sh"),
    )
    extract_archive(data, dest)
    assert (dest / "main.tf").read_text() == 'resource "terraform_data" "x" {}\n'
    assert mode_of(dest / "main.tf") == 0o600
    assert mode_of(dest / "scripts/start.sh") == 0o700
    assert mode_of(dest / "scripts") == 0o700
    assert (dest / "scripts/again.sh").read_bytes() == b"#!/bin/sh\n"
    assert (dest / "start").is_symlink() and (dest / "start").read_bytes() == b"#!/bin/sh\n"


def test_gzipped_tar_is_recognised_by_content(dest: Path) -> None:
    extract_archive(gzip.compress(tar_bytes(file_member("main.tf", b"gz"))), dest)
    assert (dest / "main.tf").read_bytes() == b"gz"


def test_zip_extracts_with_private_modes(dest: Path) -> None:
    data = zip_bytes(("main.tf", b"zip", 0o644), ("bin/", b"", stat.S_IFDIR | 0o755), ("bin/run", b"#!", 0o755))
    extract_archive(data, dest)
    assert (dest / "main.tf").read_bytes() == b"zip"
    assert mode_of(dest / "main.tf") == 0o600
    assert mode_of(dest / "bin/run") == 0o700
    assert mode_of(dest / "bin") == 0o700


def test_pack_directory_skips_hidden_files_and_state_but_keeps_the_lock_file(tmp_path: Path, dest: Path) -> None:
    source = tmp_path / "template"
    for name in ("main.tf", "README.md", ".terraform.lock.hcl", "scripts/start.sh", "scripts/.cache"):
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        (source / name).write_text(name)
    (source / "scripts/start.sh").chmod(0o755)
    for skipped in ("terraform.tfstate", "terraform.tfstate.backup", ".env", ".terraform/providers/p", ".git/HEAD"):
        (source / skipped).parent.mkdir(parents=True, exist_ok=True)
        (source / skipped).write_text("secret")

    data = pack_directory(source)
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        names = archive.getnames()
    assert names == [".terraform.lock.hcl", "README.md", "main.tf", "scripts", "scripts/start.sh"]

    extract_archive(data, dest)
    assert (dest / "scripts/start.sh").read_text() == "scripts/start.sh"
    assert mode_of(dest / "scripts/start.sh") == 0o700
    assert sorted(path.relative_to(dest).as_posix() for path in dest.rglob("*")) == sorted(names)


def test_an_archive_is_given_as_the_kind_asked_and_unchanged_when_it_is_that_kind_already() -> None:
    tar = tar_bytes(file_member("main.tf", b"terraform {}\n"), file_member("modules/a/x.tf", b"# a\n"))
    assert archive_as(tar, "tar") == tar
    zipped = archive_as(tar, "zip")
    with zipfile.ZipFile(io.BytesIO(zipped)) as archive:
        assert {name: archive.read(name) for name in archive.namelist() if not name.endswith("/")} == {
            "main.tf": b"terraform {}\n",
            "modules/a/x.tf": b"# a\n",
        }
    assert archive_as(zipped, "zip") == zipped
    for packed in (archive_as(zipped, "tar"), archive_as(gzip.compress(tar), "tar")):
        with tarfile.open(fileobj=io.BytesIO(packed), mode="r:") as archive:
            member = archive.extractfile("modules/a/x.tf")
            assert member is not None and member.read() == b"# a\n"
    # Repacking unpacks with the daemon's checks: what would escape is refused, not copied.
    escaping = tar_bytes(file_member("../outside.tf"))
    with pytest.raises(ArchiveError):
        archive_as(escaping, "zip")
