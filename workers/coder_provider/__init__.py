"""Slipway's own `coder/coder` Terraform provider, schema-compatible with Coder's for what templates use.

Terraform starts it as a plugin (see workers/provider_install.py); `main()` serves it on go-plugin's handshake.
"""

from workers.coder_provider.provider import CoderProvider


def main() -> None:
    from workers.coder_provider.framework import serve

    serve(CoderProvider())


__all__ = ["CoderProvider", "main"]
