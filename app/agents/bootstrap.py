"""How the agent gets into a workspace: init scripts, and the offline bundle they download.

A template's ``coder_agent.init_script`` comes from :func:`agent_scripts`, handed to the Terraform provider with
each build (it fills in ``${ACCESS_URL}`` and ``${AUTH_TYPE}`` itself). ``GET /api/v2/init-script/<os>/<arch>``
serves the same script filled in for this server, and ``GET /bin/slipway-agent-<os>-<arch>.tar.gz`` the bundle
the script installs. Both are public: a workspace has no session, and neither holds a secret (the agent token
reaches the workspace through the template, never through these).
"""

from __future__ import annotations

import base64
import functools
import hashlib
import logging
from pathlib import Path
from urllib.parse import quote

from flask import Response, current_app, send_file

from app.agents import bundles
from app.auth.blueprints import page_blueprint
from app.core.config import Settings
from app.core.errors import InvalidInput

log = logging.getLogger(__name__)

SCRIPTS_DIR = Path(__file__).with_name("bootstrap")
# Coder's os/arch pairs for coder_agent.
SUPPORTED: dict[str, tuple[str, ...]] = {
    "linux": ("amd64", "arm64", "armv7"),
    "darwin": ("amd64", "arm64"),
    "windows": ("amd64", "arm64"),
}

bp = page_blueprint("agent_bootstrap", __name__, public=("init_script", "agent_bundle"))


def is_supported(os_name: str, arch: str) -> bool:
    return arch in SUPPORTED.get(os_name, ())


@functools.cache
def script_template(os_name: str, arch: str) -> str:
    """The script for a platform with ``${ACCESS_URL}`` and ``${AUTH_TYPE}`` still to fill in."""
    if not is_supported(os_name, arch):
        platforms = ", ".join(f"{os}/{a}" for os, arches in SUPPORTED.items() for a in arches)
        raise InvalidInput(f"No agent init script for {os_name}/{arch}; supported: {platforms}.")
    source = SCRIPTS_DIR / ("windows.ps1" if os_name == "windows" else "unix.sh")
    # ${OS} is ours; ${ARCH} is filled before the provider sees the script, as Coder's provisioner does.
    return source.read_text(encoding="utf-8").replace("${OS}", os_name).replace("${ARCH}", arch)


def agent_scripts() -> dict[str, str]:
    """``"<os>_<arch>"`` → script, for a build's payload (the provider reads ``CODER_AGENT_SCRIPT_<os>_<arch>``)."""
    return {f"{os}_{arch}": script_template(os, arch) for os, arches in SUPPORTED.items() for arch in arches}


def render_init_script(os_name: str, arch: str, access_url: str, auth_type: str = "token") -> str:
    # The scripts quote the URL in single quotes; a quote in it would end the string, so it is percent-encoded.
    url = quote(access_url.rstrip("/") + "/", safe=":/?#[]@!$&()*+,;=%~")
    return script_template(os_name, arch).replace("${ACCESS_URL}", url).replace("${AUTH_TYPE}", auth_type)


def content_digest(sha256: bytes) -> str:
    """An RFC 9530 ``Content-Digest`` value."""
    return f"sha-256=:{base64.b64encode(sha256).decode()}:"


@bp.get("/api/v2/init-script/<os_name>/<arch>")
def init_script(os_name: str, arch: str) -> Response:
    settings: Settings = current_app.config["SLIPWAY_SETTINGS"]
    body = render_init_script(os_name, arch, settings.access_url).encode()
    response = Response(body, mimetype="text/plain")
    response.headers["Content-Digest"] = content_digest(hashlib.sha256(body).digest())
    return response


@bp.get("/bin/slipway-agent-<platform>.tar.gz")
def agent_bundle(platform: str) -> Response:
    os_name, _, arch = platform.partition("-")
    if not is_supported(os_name, arch):
        return Response(f"There is no agent for {platform}.\n", 404, mimetype="text/plain")
    settings: Settings = current_app.config["SLIPWAY_SETTINGS"]
    try:
        bundle = bundles.agent_bundle(settings.agent_wheelhouse, platform, settings.data_dir / "agent-bundles")
    except bundles.BundleUnavailable as exc:
        # The wheelhouse path is for the operator's log, not for anonymous callers.
        log.warning("agent bundle for %s unavailable (wheelhouse %s): %s", platform, settings.agent_wheelhouse, exc)
        return Response(exc.message + "\n", exc.status, mimetype="text/plain")
    response = send_file(
        bundle.path,
        mimetype="application/gzip",
        download_name=f"slipway-agent-{platform}.tar.gz",
        etag=bundle.sha256,
        conditional=True,
        max_age=0,
    )
    if response.status_code == 200:
        # The digest of the whole file: a range (206) or not-modified (304) answer carries other bytes or none.
        response.headers["Content-Digest"] = content_digest(bytes.fromhex(bundle.sha256))
    return response
