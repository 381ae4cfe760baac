"""Encryption of secrets at rest: the one facility every column holding a secret goes through.

A stored value is ``enc1:<key id>:`` followed by a 96-bit random nonce and the AES-256-GCM ciphertext with its
tag; the header is authenticated too. The key id is the first 8 hex digits of the key's SHA-256, so a value says
which key it needs, and an error or ``slipway server encryption status`` can name it.

AES-GCM rather than Fernet: values stay raw bytes (Fernet is base64 text, a third larger, and a workspace's
Terraform state can be megabytes), decrypting a 1 MB state takes about 0.3 ms against Fernet's 20 ms here, and
keys are 32 random bytes in base64 (``openssl rand -base64 32``), the format Coder's dbcrypt uses too.

The keyring belongs to the application (``app.extensions``), never to the module: tests run several apps, with
different keys, in one process.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass, field

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from flask import current_app

from app.core.errors import DomainError

KEY_BYTES = 32
NONCE_BYTES = 12
KEY_ID_CHARS = 8
FORMAT = b"enc1:"
HEADER_BYTES = len(FORMAT) + KEY_ID_CHARS + 1
# Keeps the derived key apart from every other use of the secret key (sessions, Redis signatures).
DERIVED_KEY_INFO = b"slipway database encryption v1"
EXTENSION = "slipway_keyring"


class EncryptionKeyMissing(DomainError):
    """A stored value was encrypted with a key this server was not given. The start-up check prevents it, so
    meeting it means a replica runs with other keys than the one that wrote the value."""

    status = 503

    def __init__(self, key_id: str) -> None:
        super().__init__(
            f"A stored secret is encrypted with key {key_id}, which this server was not given "
            "(--encryption-keys). An operator must configure it."
        )
        self.key_id = key_id


class UndecryptableValue(DomainError):
    """A stored value is not in our format, or its key id matches but it does not decrypt (changed in the
    database, or a different key with a colliding id)."""

    status = 500


def key_id_of_secret(secret: bytes) -> str:
    return hashlib.sha256(secret).hexdigest()[:KEY_ID_CHARS]


@dataclass(frozen=True)
class EncryptionKey:
    secret: bytes = field(repr=False)
    # Derived from the server's secret key (no --encryption-keys given, or the fallback for data written then).
    derived: bool = False

    @property
    def key_id(self) -> str:
        return key_id_of_secret(self.secret)

    @property
    def digest(self) -> str:
        """The SHA-256 of the key: what the key table keeps (it tells nothing about the key itself)."""
        return hashlib.sha256(self.secret).hexdigest()

    @property
    def label(self) -> str:
        return f"{self.key_id} (derived from the secret key)" if self.derived else self.key_id


def parse_keys(text: str) -> tuple[bytes, ...]:
    """Comma-separated base64 keys of 32 bytes. Errors name the key by position, never by its text."""
    keys: list[bytes] = []
    for position, item in enumerate((part.strip() for part in text.split(",")), start=1):
        if not item:
            continue
        try:
            # Standard or URL-safe alphabet, as `openssl rand -base64 32` or a Python script would write it.
            secret = base64.b64decode(item.replace("-", "+").replace("_", "/"), validate=True)
        except (binascii.Error, ValueError):
            raise ValueError(f"key {position} is not base64 (make one with: openssl rand -base64 32)") from None
        if len(secret) != KEY_BYTES:
            raise ValueError(
                f"key {position} is {len(secret)} bytes; keys are {KEY_BYTES} random bytes in base64 "
                "(make one with: openssl rand -base64 32)"
            )
        if secret in keys:
            raise ValueError(f"key {position} is given twice")
        keys.append(secret)
    return tuple(keys)


def derive_key(secret_key: str) -> bytes:
    """The key used when none is configured: HKDF-SHA256 of the server's secret key."""
    hkdf = HKDF(algorithm=hashes.SHA256(), length=KEY_BYTES, salt=None, info=DERIVED_KEY_INFO)
    return hkdf.derive(secret_key.encode())


def key_id_of(stored: bytes) -> str | None:
    """The id of the key a stored value names, or None when the value is not in our format."""
    if len(stored) < HEADER_BYTES or not stored.startswith(FORMAT) or stored[HEADER_BYTES - 1 : HEADER_BYTES] != b":":
        return None
    return stored[len(FORMAT) : HEADER_BYTES - 1].decode("ascii", errors="replace")


class Keyring:
    """The configured keys: the first encrypts, every one decrypts."""

    def __init__(self, keys: Sequence[EncryptionKey]) -> None:
        if not keys:
            raise ValueError("a keyring needs at least one key")
        self.keys = tuple(keys)
        self._by_id: dict[str, tuple[EncryptionKey, AESGCM]] = {}
        for key in self.keys:
            if key.key_id in self._by_id:
                if self._by_id[key.key_id][0].secret == key.secret:
                    continue  # an explicit key that equals the derived one: the same key
                raise ValueError(f"two encryption keys share the id {key.key_id}; generate another key")
            self._by_id[key.key_id] = (key, AESGCM(key.secret))

    @property
    def active(self) -> EncryptionKey:
        return self.keys[0]

    def knows(self, key_id: str) -> bool:
        return key_id in self._by_id

    def encrypt(self, plaintext: bytes) -> bytes:
        header = FORMAT + self.active.key_id.encode("ascii") + b":"
        nonce = os.urandom(NONCE_BYTES)
        return header + nonce + self._by_id[self.active.key_id][1].encrypt(nonce, plaintext, header)

    def decrypt(self, stored: bytes) -> bytes:
        key_id = key_id_of(stored)
        if key_id is None:
            raise UndecryptableValue("A stored secret is not in the encrypted format; it cannot be read.")
        if key_id not in self._by_id:
            raise EncryptionKeyMissing(key_id)
        header, nonce = stored[:HEADER_BYTES], stored[HEADER_BYTES : HEADER_BYTES + NONCE_BYTES]
        try:
            return self._by_id[key_id][1].decrypt(nonce, stored[HEADER_BYTES + NONCE_BYTES :], header)
        except InvalidTag:
            raise UndecryptableValue(
                f"A stored secret (key {key_id}) does not decrypt: it was changed in the database, or key "
                f"{key_id} is not the key that wrote it."
            ) from None

    def reencrypt(self, stored: bytes) -> bytes | None:
        """The value under the active key, or None when it already is."""
        if key_id_of(stored) == self.active.key_id:
            return None
        return self.encrypt(self.decrypt(stored))


def build_keyring(explicit_keys: Sequence[bytes], secret_key: str) -> Keyring:
    """The given keys in order, then the key derived from the secret key: without given keys it encrypts, with
    them it still reads what was written before they were configured (until a rotation leaves nothing on it)."""
    derived = EncryptionKey(derive_key(secret_key), derived=True)
    return Keyring([*(EncryptionKey(secret) for secret in explicit_keys), derived])


def current_keyring() -> Keyring:
    keyring: Keyring = current_app.extensions[EXTENSION]
    return keyring
