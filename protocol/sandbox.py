"""What `slipway server` tells each built-in daemon about its sandbox (workers/sandbox.py applies it)."""

from __future__ import annotations

from protocol.codec import Message

# The environment variable through which `slipway server` hands its built-in daemons their sandbox.
SANDBOX_ENV = "SLIPWAY_PROVISIONER_SANDBOX"


class SandboxPolicy(Message):
    """``protected``: paths that must stay out of reach, read or write. ``writable``: the only places writes may go
    (None: writes go wherever the user's own permissions allow). ``required``: refuse to run without Landlock."""

    protected: tuple[str, ...] = ()
    writable: tuple[str, ...] | None = None
    required: bool = True
