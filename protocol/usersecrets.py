"""How a person's secret reaches Terraform: the variables the coder provider's ``data "coder_secret"`` reads.

Shared by the server, which fills them for a build of the owner's workspace, and the provider, which reads them.
"""

from __future__ import annotations

import re

# A POSIX identifier, as Coder's provider requires of `env`.
SECRET_ENV_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


def secret_env_variable(name: str) -> str:
    return f"CODER_SECRET_ENV_{name}"


def secret_file_variable(path: str) -> str:
    # Hex, because a path holds characters no variable name may.
    return f"CODER_SECRET_FILE_{path.encode().hex()}"
