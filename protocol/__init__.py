"""What crosses a process boundary in Slipway, typed and declared once (DESIGN.md "Package layout").

The server (``app``), the provisioner daemon (``workers``), the workspace agent (``agent``) and the CLI (``cli``)
all import this package; it imports nothing of theirs, holds no database or web code, and needs only the standard
library (except ``parameters``, whose template regexes run on RE2; the agent never imports it). Messages are
frozen dataclasses deriving from :class:`protocol.codec.Message`; the pure rules both sides apply
(tags, parameter values, durations) live beside them.
"""

import sys

# httpx imports its own command-line client (``httpx._main``: rich, pygments and click's help machinery) whenever
# rich is installed, which costs every Slipway process 50-100 ms of start-up for a program none of them runs. A
# None in sys.modules makes that one import fail, and httpx falls back to its stub. Every Slipway package imports
# this one before httpx (cli, app, workers and agent import it first thing).
sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]
