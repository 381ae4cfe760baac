"""``python -m agent``: exit code 2 for bad configuration, 0 after a clean shutdown."""

import sys

# httpx imports its command-line client (click, rich, pygments) on import whenever those happen to be installed, as
# they are in a daemon's environment that runs examples/local's agents: a fifth of the agent's start-up, for a
# client it never runs. A None entry makes that import fail, and httpx then skips it (its documented fallback).
sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]  # None is how an import is refused

from agent.main import main  # noqa: E402 - after the line above, which must precede httpx's import

main()
