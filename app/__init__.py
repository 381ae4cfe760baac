"""The Slipway web server. :func:`app.factory.create_app` builds it; each feature is a package here, over the
shared ``app.core`` and ``app.events`` (DESIGN.md "Package layout")."""
