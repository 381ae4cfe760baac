"""Masking secret values (sensitive Terraform variables) in job logs, in the forms a template is likely to print.

A template author rarely prints a secret as is; ``upper(var.token)``, ``base64encode(var.token)``,
``urlencode(var.token)`` or ``jsonencode(...)`` leak it just the same. So each secret is looked for:

- in any letter case (``upper``/``lower``/``title``), each character as itself, percent-encoded (``%2F`` or
  ``%2f``, ``+`` for a space: any URL encoding) or as a JSON string escape (``\\u0026``, ``\\"``, ``\\/``);
- as hex (``secret.encode().hex()``, either case);
- in base64, standard and URL-safe, padded or not, alone or inside a longer base64 string: base64 turns each
  3 bytes into 4 characters, so wherever the secret sits in the encoded bytes (3 alignments), the characters
  computed from its bytes alone are the same. Those "cores" are what is masked (base64 is case-sensitive).

Any other transformation (a hash, reversing, encryption, base64 of an upper-cased value, splitting it over lines)
is not recognised: README "Live logs" says so. One pattern per set of secrets, compiled once and cached, so a
batch of 1,000 lines is a single regex pass over each line.

The pattern grows with the secrets, up to twenty characters of regex per character of secret, and compiling it takes
seconds for 64 KiB of secrets (issue 34, M2: eight 64 KiB secrets took a web worker to 512 MB and /healthz to
6.4 s). So its cost is bounded: a person's secrets are capped in number and total size (app/usersecrets), a job's
mask is built once (:class:`JobMasks`) in a thread of its own (app/core/offload.py), and only the first
``MAX_PATTERN_CHARS`` of secret text, shortest values first, is looked for in every form: any further value (a
template's huge sensitive variable) is masked as written only.
"""

from __future__ import annotations

import base64
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

REDACTED = "********"
# Shorter values ("1", "eu") would mask ordinary words all over the log while protecting nothing.
MIN_SECRET_CHARS = 4
# JSON's short escapes (RFC 8259), as a JSON encoder may write them inside a string.
JSON_SHORT_ESCAPES = {'"': '\\"', "\\": "\\\\", "/": "\\/", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r",
                      "\t": "\\t"}  # fmt: skip
# Base64 characters that come from the secret's bytes alone, by how many bytes precede it in its 3-byte group:
# where the core starts in the encoding of (that many bytes + secret).
CORE_START = {0: 0, 1: 2, 2: 3}
# Secret text looked for in all its forms, per mask: a pattern of at most a few MiB, compiled in a few seconds.
MAX_PATTERN_CHARS = 64 * 1024
# Masks kept per process: the running jobs whose logs it stores (a job's mask outlives its job here, harmlessly).
MAX_CACHED_MASKS = 32


def secret_needles(values: Iterable[str]) -> tuple[str, ...]:
    """The values worth masking: long enough, and each line of a multi-line value on its own (a key printed
    line by line), longest first so that a secret containing another is masked whole."""
    needles = {
        candidate
        for value in values
        for candidate in (value, *value.splitlines())
        if len(candidate) >= MIN_SECRET_CHARS
    }
    return tuple(sorted(needles, key=lambda needle: (-len(needle), needle)))


@dataclass(frozen=True)
class SecretMask:
    """What hides one set of secrets: a pattern of every form of most, and the exact text of any past the budget."""

    pattern: re.Pattern[str] | None
    # Longest first; replaced before the pattern runs, so that a short secret inside a long one is not masked first
    # (which would leave the rest of the long one unmatched).
    exact: tuple[str, ...] = ()

    def apply(self, text: str) -> str:
        for needle in self.exact:
            text = text.replace(needle, REDACTED)
        return text if self.pattern is None else self.pattern.sub(REDACTED, text)

    def apply_all(self, texts: list[str]) -> list[str]:
        return [self.apply(text) for text in texts]


def build_mask(secrets: tuple[str, ...]) -> SecretMask:
    """The mask of ``secrets`` (as :func:`secret_needles` gives them): every form of the shortest, up to
    ``MAX_PATTERN_CHARS`` of them, and the exact text of the rest."""
    budget, full, exact = MAX_PATTERN_CHARS, [], []
    for needle in sorted(secrets, key=len):
        if len(needle) <= budget:
            full.append(needle)
            budget -= len(needle)
        else:
            exact.append(needle)
    return SecretMask(secrets_pattern(tuple(full)), tuple(sorted(exact, key=len, reverse=True)))


class JobMasks:
    """Each running job's mask, built once from its secrets when its first log batch arrives (not per batch), for the
    few jobs a process stores logs of at a time."""

    def __init__(self, size: int = MAX_CACHED_MASKS) -> None:
        self._size = size
        self._masks: OrderedDict[str, SecretMask] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, job_id: str, build: Callable[[], SecretMask]) -> SecretMask:
        with self._lock:
            mask = self._masks.get(job_id)
            if mask is not None:
                self._masks.move_to_end(job_id)
                return mask
        mask = build()  # outside the lock: two first batches of one job may both build it, which is harmless
        with self._lock:
            self._masks[job_id] = mask
            while len(self._masks) > self._size:
                self._masks.popitem(last=False)
        return mask

    def forget(self, job_id: str) -> None:
        with self._lock:
            self._masks.pop(job_id, None)


def secrets_pattern(secrets: tuple[str, ...]) -> re.Pattern[str] | None:
    """One regex for every form of every secret, longest alternatives first (alternation takes the first that
    matches, and a longer form must win over a shorter one it starts with)."""
    alternatives: dict[str, int] = {}
    for secret in secrets:
        for alternative, weight in _forms(secret):
            alternatives[alternative] = max(weight, alternatives.get(alternative, 0))
    if not alternatives:
        return None
    ordered = sorted(alternatives, key=lambda alternative: -alternatives[alternative])
    return re.compile("|".join(ordered))


def _forms(secret: str) -> list[tuple[str, int]]:
    """Each form of ``secret`` as a regex alternative, with the length of text it stands for (for ordering)."""
    raw = secret.encode()
    forms = [
        ("(?i:" + "".join(_char_pattern(char) for char in secret) + ")", len(secret)),
        ("(?i:" + re.escape(raw.hex()) + ")", 2 * len(raw)),
    ]
    for encode in (base64.b64encode, base64.urlsafe_b64encode):
        whole = encode(raw).decode().rstrip("=")
        forms.append((re.escape(whole) + "={0,2}", len(whole) + 2))
        for before in CORE_START:
            core = _base64_core(encode, raw, before)
            if len(core) >= MIN_SECRET_CHARS:
                forms.append((re.escape(core), len(core)))
    return forms


def _base64_core(encode: Callable[[bytes], bytes], raw: bytes, before: int) -> str:
    """The base64 characters of ``raw`` that do not depend on the bytes around it, when ``before`` bytes of its
    3-byte group precede it."""
    encoded = encode(b"\0" * before + raw).decode()
    total = before + len(raw)
    # Whole groups, then the characters of the last partial group made of the secret's bits only.
    end = 4 * (total // 3) + total % 3
    return encoded[CORE_START[before] : end]


def _char_pattern(char: str) -> str:
    """``char`` as itself, percent-encoded (its UTF-8 bytes; ``+`` for a space) or JSON-escaped."""
    if char.isascii() and char.isalnum():  # no encoder escapes these: the pattern stays small and fast
        return re.escape(char)
    forms = {re.escape(char)}
    forms.add(re.escape("".join(f"%{byte:02x}" for byte in char.encode())))
    if char == " ":
        forms.add(re.escape("+"))
    if char in JSON_SHORT_ESCAPES:
        forms.add(re.escape(JSON_SHORT_ESCAPES[char]))
    code = ord(char)
    if code > 0xFFFF:  # a JSON encoder writes it as a surrogate pair
        high, low = 0xD800 + ((code - 0x10000) >> 10), 0xDC00 + ((code - 0x10000) & 0x3FF)
        forms.add(re.escape(f"\\u{high:04x}\\u{low:04x}"))
    else:
        forms.add(re.escape(f"\\u{code:04x}"))
    return "(?:" + "|".join(sorted(forms, key=len, reverse=True)) + ")"
