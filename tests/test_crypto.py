"""The keyring that encrypts secrets at rest, and the settings that give it its keys."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import pytest

from app.core.config import SettingsError, load_settings
from app.core.crypto import (
    EncryptionKey,
    EncryptionKeyMissing,
    Keyring,
    UndecryptableValue,
    build_keyring,
    derive_key,
    key_id_of,
)
from tests.support.server import run_server_once

FIRST, SECOND = os.urandom(32), os.urandom(32)


def text_of(*keys: bytes) -> str:
    return ",".join(base64.b64encode(key).decode() for key in keys)


def test_a_value_round_trips_and_names_its_key() -> None:
    keyring = Keyring([EncryptionKey(FIRST)])
    stored = keyring.encrypt(b"terraform state")
    key_id = EncryptionKey(FIRST).key_id
    assert stored.startswith(f"enc1:{key_id}:".encode()) and b"terraform state" not in stored
    assert key_id_of(stored) == key_id
    assert keyring.decrypt(stored) == b"terraform state"
    assert keyring.encrypt(b"terraform state") != stored, "every write has a fresh nonce"
    assert keyring.decrypt(keyring.encrypt(b"")) == b""


def test_the_first_key_encrypts_and_every_key_decrypts() -> None:
    old = Keyring([EncryptionKey(FIRST)]).encrypt(b"old")
    both = Keyring([EncryptionKey(SECOND), EncryptionKey(FIRST)])
    assert both.decrypt(old) == b"old"
    assert key_id_of(both.encrypt(b"new")) == EncryptionKey(SECOND).key_id
    assert key_id_of(both.reencrypt(old) or b"") == EncryptionKey(SECOND).key_id
    assert both.reencrypt(both.encrypt(b"new")) is None, "a value on the first key stays as it is"


def test_a_value_of_a_key_not_given_names_that_key() -> None:
    stored = Keyring([EncryptionKey(FIRST)]).encrypt(b"secret")
    with pytest.raises(EncryptionKeyMissing) as caught:
        Keyring([EncryptionKey(SECOND)]).decrypt(stored)
    assert caught.value.key_id == EncryptionKey(FIRST).key_id
    assert EncryptionKey(FIRST).key_id in caught.value.message and "--encryption-keys" in caught.value.message


def test_a_changed_value_or_a_wrong_key_does_not_decrypt() -> None:
    keyring = Keyring([EncryptionKey(FIRST)])
    stored = bytearray(keyring.encrypt(b"secret"))
    stored[-1] ^= 1
    with pytest.raises(UndecryptableValue, match="does not decrypt"):
        keyring.decrypt(bytes(stored))
    # Another key passed off under the first one's id (its header is authenticated as well).
    impostor = Keyring([EncryptionKey(SECOND)]).encrypt(b"secret")
    forged = impostor.replace(EncryptionKey(SECOND).key_id.encode(), EncryptionKey(FIRST).key_id.encode(), 1)
    with pytest.raises(UndecryptableValue):
        keyring.decrypt(forged)
    with pytest.raises(UndecryptableValue, match="not in the encrypted format"):
        keyring.decrypt(b'{"version": 4}')


def test_without_keys_a_key_derived_from_the_secret_key_encrypts() -> None:
    assert derive_key("secret one") == derive_key("secret one") != derive_key("secret two")
    assert len(derive_key("secret one")) == 32
    zero_setup = build_keyring((), "secret one")
    assert zero_setup.active.derived and zero_setup.active.secret == derive_key("secret one")
    written = zero_setup.encrypt(b"state")
    # Keys given later encrypt; the derived one still reads what was written before them.
    pinned = build_keyring((FIRST,), "secret one")
    assert pinned.active.secret == FIRST and pinned.decrypt(written) == b"state"


def test_keys_come_from_the_setting_or_its_file(tmp_path: Path) -> None:
    assert load_settings({"SLIPWAY_ENCRYPTION_KEYS": text_of(FIRST, SECOND)}).encryption_keys == (FIRST, SECOND)
    url_safe = base64.urlsafe_b64encode(FIRST).decode().rstrip("=") + "="
    assert load_settings({"SLIPWAY_ENCRYPTION_KEYS": f" {url_safe} "}).encryption_keys == (FIRST,)
    key_file = tmp_path / "keys"
    key_file.write_text(text_of(SECOND) + "\n")
    from_file = load_settings({"SLIPWAY_ENCRYPTION_KEYS_FILE": str(key_file)})
    assert from_file.encryption_keys == (SECOND,)
    assert key_file.absolute() in from_file.secret_files, "kept out of the built-in daemons' reach"
    assert load_settings({}).encryption_keys == ()
    assert text_of(FIRST) not in repr(load_settings({"SLIPWAY_ENCRYPTION_KEYS": text_of(FIRST)}))


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("not base64!", "SLIPWAY_ENCRYPTION_KEYS: key 1 is not base64"),
        (text_of(FIRST) + ",c2hvcnQ=", "SLIPWAY_ENCRYPTION_KEYS: key 2 is 5 bytes; keys are 32 random bytes"),
        (base64.b64encode(os.urandom(16)).decode(), "key 1 is 16 bytes"),
        (text_of(FIRST, FIRST), "key 2 is given twice"),
    ],
    # Named, not by their random keys: parallel workers must collect the same test ids.
    ids=["not-base64", "second-key-short", "first-key-short", "key-repeated"],
)
def test_bad_key_text_is_a_clear_settings_error(value: str, expected: str) -> None:
    with pytest.raises(SettingsError) as caught:
        load_settings({"SLIPWAY_ENCRYPTION_KEYS": value})
    assert expected in str(caught.value)
    assert value.split(",")[-1] not in str(caught.value), "a key's text is never repeated"


def test_keys_in_the_setting_and_a_file_at_once_are_refused(tmp_path: Path) -> None:
    key_file = tmp_path / "keys"
    key_file.write_text(text_of(FIRST))
    with pytest.raises(SettingsError, match="set only one of SLIPWAY_ENCRYPTION_KEYS and SLIPWAY_ENCRYPTION_KEYS_FILE"):
        load_settings({"SLIPWAY_ENCRYPTION_KEYS": text_of(SECOND), "SLIPWAY_ENCRYPTION_KEYS_FILE": str(key_file)})


def test_the_server_refuses_bad_key_text_in_one_line(tmp_path: Path) -> None:
    result = run_server_once("--data-dir", str(tmp_path), "--encryption-keys", "c2hvcnQ=")
    assert result.returncode != 0
    assert result.stderr.strip() == (
        "slipway: SLIPWAY_ENCRYPTION_KEYS: key 1 is 5 bytes; keys are 32 random bytes in base64 "
        "(make one with: openssl rand -base64 32)"
    )
