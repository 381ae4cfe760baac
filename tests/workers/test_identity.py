"""A daemon's identity survives restarts, and two daemons of one name and cache dir never share it."""

from __future__ import annotations

import uuid
from pathlib import Path

from workers.identity import claim_identity


def test_the_identity_is_kept_across_restarts_and_differs_by_name_and_cache_dir(tmp_path: Path) -> None:
    first = claim_identity(tmp_path / "cache", "builder")
    first.release()
    again = claim_identity(tmp_path / "cache", "builder")
    again.release()
    assert again.id == first.id and uuid.UUID(first.id)
    other_name = claim_identity(tmp_path / "cache", "builtin-1")
    other_dir = claim_identity(tmp_path / "elsewhere", "builder")
    assert len({first.id, other_name.id, other_dir.id}) == 3
    other_name.release()
    other_dir.release()


def test_a_second_daemon_running_with_the_same_name_and_cache_dir_gets_its_own_id(tmp_path: Path) -> None:
    running = claim_identity(tmp_path, "builder")
    second = claim_identity(tmp_path, "builder")
    assert second.id != running.id and second.lock is None
    running.release()
    after = claim_identity(tmp_path, "builder")
    after.release()
    assert after.id == running.id  # the kept one is still the first's


def test_a_damaged_identity_file_is_replaced(tmp_path: Path) -> None:
    (tmp_path / "identity").mkdir()
    (tmp_path / "identity" / "builder").write_text("not a uuid")
    identity = claim_identity(tmp_path, "builder")
    identity.release()
    assert uuid.UUID(identity.id) and (tmp_path / "identity" / "builder").read_text().strip() == identity.id
