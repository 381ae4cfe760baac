"""Secret values are masked in job logs in the forms templates print them: any case, URL- and JSON-encoded, hex,
and base64 (standard or URL-safe, padded or not, alone or inside a longer base64 string)."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path

import pytest

from app.provisioning.masking import (
    MAX_PATTERN_CHARS,
    REDACTED,
    JobMasks,
    SecretMask,
    build_mask,
    secret_needles,
)

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


def mask_secrets(text: str, secrets: tuple[str, ...]) -> str:
    return build_mask(secrets).apply(text)


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
    mask = build_mask(secrets)  # built once per job (JobMasks), then applied to every batch
    began = time.perf_counter()
    masked = [mask.apply(line) for line in lines]
    took = time.perf_counter() - began
    assert masked == lines
    assert took < 1.0, f"masking 1,000 lines took {took:.3f} s"


def test_secrets_past_the_pattern_budget_are_masked_as_written_and_the_shortest_in_every_form() -> None:
    """Issue 34, M2: the pattern's size (and the seconds its compiling takes) is bounded, whatever the secrets."""
    token = "short-token/value"
    huge = "h" * MAX_PATTERN_CHARS + "-the-end"  # past the budget on its own
    holder = "prefix " + token + " suffix" + "x" * MAX_PATTERN_CHARS  # contains the token: must go whole
    mask = build_mask(secret_needles([token, huge, holder]))
    assert mask.pattern is not None and len(mask.pattern.pattern) < 40 * 1024
    assert set(mask.exact) == {huge, holder}
    assert mask.apply(f"a {huge} b") == f"a {REDACTED} b"
    assert mask.apply(holder) == REDACTED
    assert mask.apply(b64(token.encode()) + " " + token.upper()) == f"{REDACTED} {REDACTED}"


def test_a_jobs_mask_is_built_once_for_all_its_batches() -> None:
    masks, built = JobMasks(size=2), []

    def build(secret: str) -> Callable[[], SecretMask]:
        return lambda: built.append(secret) or build_mask(secret_needles([secret]))

    for _ in range(3):
        assert masks.get("job-1", build("first-secret")).apply("first-secret") == REDACTED
    assert built == ["first-secret"]
    masks.get("job-2", build("second-secret"))
    masks.get("job-3", build("third-secret"))  # past the size: the least recently used (job-1) goes
    masks.get("job-1", build("first-secret"))
    assert built == ["first-secret", "second-secret", "third-secret", "first-secret"]


def test_work_off_the_loop_lets_other_greenlets_run(tmp_path: Path) -> None:
    """Under gevent (the web worker), run_off_loop runs in a real thread: a greenlet goes on meanwhile. The work waits
    for that greenlet; run on the loop, it would wait in vain and report False."""
    script = tmp_path / "offload.py"
    script.write_text(
        "from gevent import monkey\n"
        "monkey.patch_all()\n"
        "import gevent, sys, threading, time\n"
        "from app.core.offload import run_off_loop\n"
        "ran = []\n"
        "def work():\n"
        "    deadline = time.monotonic() + 30\n"
        "    while not ran and time.monotonic() < deadline:\n"
        "        sum(range(1000))  # busy, as a regex compile is: it never yields to the hub\n"
        "    return bool(ran)\n"
        "other = gevent.spawn(ran.append, 1)\n"
        "print(run_off_loop(work))\n"
    )
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip() == "True", done.stderr
