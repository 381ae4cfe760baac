"""The `local` example with one more app: ``site``, the dev server's port as a subdomain app (for the end-to-end
test of dev URLs and bench/apps.py). Copied, never edited in place: examples/local stays as shipped."""

from __future__ import annotations

import shutil
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parent.parent.parent / "examples" / "local"

SITE_APP = """
resource "coder_app" "site" {
  agent_id     = coder_agent.main.id
  slug         = "site"
  display_name = "Site"
  url          = "http://localhost:${data.coder_parameter.dev_port.value}"
  subdomain    = true
  share        = data.coder_parameter.dev_share.value
}
"""


def local_with_site_app(destination: Path) -> Path:
    shutil.copytree(EXAMPLE, destination)
    (destination / "site_app.tf").write_text(SITE_APP)
    return destination
