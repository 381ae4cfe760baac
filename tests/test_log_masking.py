"""Secret values are masked in job logs in the forms templates print them: any case, URL- and JSON-encoded, hex,
and base64 (standard or URL-safe, padded or not, alone or inside a longer base64 string)."""

from __future__ import annotations

import base64
import json
import time
import urllib.parse
from collections.abc import Callable

import pytest

from app.provisioning.masking import REDACTED, mask_secrets, secret_needles

SECRET = "s3cr3t-Tok/en v&lue"


def go_query_escape(text: str) -> str:
    """Terraform's urlencode (Go's url.QueryEscape): spaces become '+', upper-case hex."""
    return urllib.parse.quote_plus(text, safe="")


def terraform_jsonencode(text: str) -> str:
    """Terraform's jsonencode escapes <, > and & as \\u003c, \\u003e, \\u0026."""
    return json.dumps(text).replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


TRANSFORMS: dict[str, Callable[[str], str]] = {
    "as is": lambda secret: secret,
    "upper": str.upper,
    "lower": str.lower,
    "title": str.title,
    "urlencode": go_query_escape,
    "percent-encoded, lower-case hex": lambda secret: urllib.parse.quote(secret, safe="").lower(),
    "quote keeping slashes": urllib.parse.quote,
    "jsonencode": terraform_jsonencode,
    "json with escaped slash": lambda secret: json.dumps(secret).replace("/", "\\/"),
    "hex": lambda secret: secret.encode().hex(),
    "HEX": lambda secret: secret.encode().hex().upper(),
    "base64encode": lambda secret: b64(secret.encode()),
    "base64, unpadded": lambda secret: b64(secret.encode()).rstrip("="),
    "base64, URL-safe": lambda secret: base64.urlsafe_b64encode(secret.encode()).decode(),
    "base64 of echo's output (a newline after)": lambda secret: b64(secret.encode() + b"\n"),
    # The secret inside a longer encoded value, at each of the three byte alignments.
    "base64 of a header": lambda secret: b64(b"Authorization: Bearer " + secret.encode()),
    "base64, 1 byte before": lambda secret: b64(b"x" + secret.encode() + b"yz"),
    "base64, 2 bytes before": lambda secret: b64(b"xy" + secret.encode() + b"z"),
    "base64, 3 bytes before": lambda secret: b64(b"xyz" + secret.encode()),
    "URL-safe base64, 1 byte before": lambda secret: base64.urlsafe_b64encode(b"?" + secret.encode()).decode(),
}


@pytest.mark.parametrize("transform", TRANSFORMS.values(), ids=TRANSFORMS.keys())
def test_each_printed_form_of_a_secret_is_masked(transform: Callable[[str], str]) -> None:
    line = f"output: token = {transform(SECRET)}"
    masked = mask_secrets(line, secret_needles([SECRET]))
    assert masked.count(REDACTED) == 1 and masked.startswith("output: token = "), masked
    # Every character that comes from the secret's bytes alone is hidden (any encoding is at least as long).
    hidden = len(line) - len(masked.replace(REDACTED, ""))
    assert hidden >= len(SECRET), masked


def test_base64_leaves_only_characters_that_mix_in_other_bytes() -> None:
    wrapped = b64(b"xy" + SECRET.encode() + b"z")
    masked = mask_secrets(wrapped, secret_needles([SECRET]))
    before, _, after = masked.partition(REDACTED)
    assert len(before) <= 3 and len(after) <= 4, masked


def test_every_occurrence_and_every_secret_is_masked_and_the_rest_is_kept() -> None:
    secrets = secret_needles(["hunter2-password", "region-key", "eu"])
    line = f"db=hunter2-password HUNTER2-PASSWORD k={b64(b'region-key')} in eu, plain words stay"
    assert mask_secrets(line, secrets) == f"db={REDACTED} {REDACTED} k={REDACTED} in eu, plain words stay"


def test_a_secret_containing_another_is_masked_whole() -> None:
    secrets = secret_needles(["abcd", "xxabcdxx"])
    assert mask_secrets("xxabcdxx and abcd", secrets) == f"{REDACTED} and {REDACTED}"


def test_each_line_of_a_multi_line_secret_is_masked_on_its_own() -> None:
    key = "-----BEGIN KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n-----END KEY-----"
    secrets = secret_needles([key])
    assert mask_secrets("MIIEvQIBADANBgkqhkiG9w0BAQEFAASC", secrets) == REDACTED


def test_short_values_and_regex_characters_are_safe() -> None:
    assert secret_needles(["abc", "", "x\ny"]) == ()
    assert mask_secrets("anything", ()) == "anything"
    tricky = "a.b*c(d)[e]$"
    secrets = secret_needles([tricky])
    assert mask_secrets(f"value {tricky} and aXbYYc", secrets) == f"value {REDACTED} and aXbYYc"


def test_non_ascii_secrets_are_masked_in_their_encodings() -> None:
    secret = "pässwörd-✓"
    secrets = secret_needles([secret])
    for printed in (secret, secret.upper(), go_query_escape(secret), json.dumps(secret)[1:-1], b64(secret.encode())):
        assert mask_secrets(printed, secrets) == REDACTED, printed


def test_a_batch_of_a_thousand_lines_is_masked_quickly() -> None:
    secrets = secret_needles([f"secret-number-{n}-{'x' * 20}" for n in range(5)])
    lines = [f"{n:04d} terraform_data.home: Creating... id={'ab' * 30} {b64(b'noise' * 8)}" for n in range(1000)]
    mask_secrets(lines[0], secrets)  # compiled once per set of secrets, then cached
    began = time.perf_counter()
    masked = [mask_secrets(line, secrets) for line in lines]
    took = time.perf_counter() - began
    assert masked == lines
    assert took < 1.0, f"masking 1,000 lines took {took:.3f} s"
