"""What every feature of the server builds on: settings, errors, column types, extensions (database, CSRF, login),
input validation, Redis, WebSockets and page helpers. Nothing here knows about a feature."""
