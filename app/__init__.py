"""The Slipway web server. :func:`app.factory.create_app` builds it; each feature is a package here, over the
shared ``app.core`` and ``app.events`` (DESIGN.md "Package layout")."""

import protocol  # noqa: F401 - first: it keeps httpx from importing its command-line client (see there)
