"""What crosses a process boundary in Slipway, typed and declared once (DESIGN.md "Package layout").

The server (``app``), the provisioner daemon (``workers``), the workspace agent (``agent``) and the CLI (``cli``)
all import this package; it imports nothing of theirs, holds no database or web code, and needs only the standard
library. Messages are frozen dataclasses deriving from :class:`protocol.codec.Message`; the pure rules both sides
apply (tags, parameter values, durations) live beside them.
"""
