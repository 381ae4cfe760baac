"""The wire between the coder provider's plugin launcher and the daemon's provider zygote (both in `workers/`).

The launcher connects to the zygote's unix socket and sends a request: a fixed-size header ("S" and the size of
what follows, zero-padded) and its environment as JSON. The child the zygote forks for it answers its pid on a
line, receives the launcher's stderr as a passed descriptor (one byte "E" carries it), and answers go-plugin's
handshake line once it serves. Stdlib only: the launcher runs without site-packages.
"""

from __future__ import annotations

# The daemon names its zygote's socket in Terraform's environment (workers/terraform/environment.py).
ZYGOTE_ENV = "SLIPWAY_PROVIDER_ZYGOTE"
# Seconds the zygote may take to hand back a serving provider before the launcher gives up on it.
TIMEOUT_ENV = "SLIPWAY_PROVIDER_ZYGOTE_TIMEOUT"
DEFAULT_TIMEOUT = 20.0
HEADER_SIZE = 16
STDERR_MARK = b"E"


def encode_header(size: int) -> bytes:
    return f"S{size:0{HEADER_SIZE - 1}d}".encode()


def decode_header(header: bytes) -> int:
    if len(header) != HEADER_SIZE or not header.startswith(b"S") or not header[1:].isdigit():
        raise ValueError(f"not a provider request: {header!r}")
    return int(header[1:])
