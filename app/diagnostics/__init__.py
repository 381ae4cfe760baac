"""The health report: what is wrong with this deployment, for admins (API.md ``GET /api/v2/debug/health``)."""
