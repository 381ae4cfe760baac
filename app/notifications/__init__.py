"""Telling people what happened to their workspaces: an inbox in the dashboard, and email and webhook deliveries
sent by a queue worker (never in a request or in the lifecycle executor's tick)."""
