"""The audit log's place among the features: which models are audited (registry), the API, the page, the CLI's
server side, retention and the Health check."""
