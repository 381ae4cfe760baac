"""`slipway agent`: the workspace agent, for use inside a workspace (agent/README.md)."""

from __future__ import annotations

import click


@click.command()
def agent() -> None:
    """Run the workspace agent inside a workspace.

    Configured by the environment: SLIPWAY_AGENT_URL and SLIPWAY_AGENT_TOKEN (or SLIPWAY_AGENT_TOKEN_FILE),
    optionally SLIPWAY_AGENT_LOG_DIR; the CODER_AGENT_* names work too. SIGTERM or Ctrl-C runs the stop
    scripts and exits.
    """
    # Imported here: the rest of the CLI must not pay for asyncssh and websockets at start-up.
    from agent.main import main

    main()
