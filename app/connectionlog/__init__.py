"""The connection log: who opened which way into which workspace (SSH, terminal, port forward, app), from where,
when, and why it ended."""
