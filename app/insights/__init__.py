"""Usage insights (Coder's /insights): per-template daily rollups, never a scan of all builds per request."""
