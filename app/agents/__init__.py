"""Workspace agents: what runs inside a workspace, how it reports, and how users reach it."""
