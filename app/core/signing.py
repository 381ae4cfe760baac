"""Signatures on what the server puts in Redis for itself (dials, tunnel records): Redis is shared with daemons
the operator trusts and reachable by whoever can reach its port, so the server believes nothing read back from it
that it cannot verify as its own (README "What Redis is trusted with")."""

from __future__ import annotations

import hashlib
import hmac

from flask import current_app

# Keeps these signatures apart from every other use of the secret key (Flask signs sessions with it).
PURPOSE = b"slipway redis messages v1"


class Signer:
    def __init__(self, secret_key: str) -> None:
        self._key = hmac.new(secret_key.encode(), PURPOSE, hashlib.sha256).digest()

    def sign(self, *parts: str) -> str:
        message = "\x00".join(parts).encode()
        return hmac.new(self._key, message, hashlib.sha256).hexdigest()

    def verify(self, signature: str, *parts: str) -> bool:
        return hmac.compare_digest(signature, self.sign(*parts))


def signer() -> Signer:
    return Signer(current_app.config["SLIPWAY_SETTINGS"].secret_key)
