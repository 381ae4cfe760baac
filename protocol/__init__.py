"""What crosses a process boundary in Slipway, typed and declared once (DESIGN.md "Package layout").

The server (``app``), the provisioner daemon (``workers``), the workspace agent (``agent``) and the CLI (``cli``)
all import this package; it imports nothing of theirs, holds no database or web code, and needs only the standard
library (except ``parameters``, whose template regexes run on RE2; the agent never imports it). Messages are
frozen dataclasses deriving from :class:`protocol.codec.Message`; the pure rules both sides apply
(tags, parameter values, durations) live beside them.
"""
