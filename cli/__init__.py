"""The `slipway` command line."""

import protocol  # noqa: F401 - first: it keeps httpx from importing its command-line client (see there)
