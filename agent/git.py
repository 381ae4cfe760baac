"""Git in the workspace, with the owner's linked accounts: ``GIT_ASKPASS``, ``GIT_SSH_COMMAND`` and
``slipway external-auth access-token``, all asking the agent's Git helper socket (agent/git_helper.py).

These run as short processes started by git, so this module imports nothing heavy (no HTTP client, no protocol
classes, and the standard modules only the SSH helper needs are imported there): a call is a Python start-up and
one line over a unix socket. ``python -m agent.git askpass PROMPT``
is what the wrappers the agent writes into its bin directory run; ``slipway gitaskpass`` is the same.
"""

from __future__ import annotations

import json
import os
import re
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from typing import Any

SOCKET_VARIABLE = "SLIPWAY_AGENT_GIT_SOCKET"
# The agent's per-run secret that every request to its socket carries: only its own workspace's processes have it.
SECRET_VARIABLE = "SLIPWAY_AGENT_GIT_SECRET"  # noqa: S105 - the name of the variable
ASKPASS_NAME = "slipway-gitaskpass"
GITSSH_NAME = "slipway-gitssh"
# git asks "Username for 'https://github.com': " then "Password for 'https://user@github.com': ".
_PROMPT = re.compile(r"^(Username|Password) for '([^']+)'")
# How long git waits for its person to link the provider in a browser: a few server-held requests in a row.
LINK_WAIT_ROUNDS = 5
SOCKET_TIMEOUT = 90.0


class HelperError(Exception):
    """One line for the terminal; the command exits non-zero."""


# In the agent --------------------------------------------------------------------------------------------------


class HelperAccess(NamedTuple):
    """Where the agent's helper listens and the secret its callers must show."""

    socket_path: Path
    secret: str


def socket_path_for(log_dir: Path) -> Path:
    """In the log directory, unless that path is too long for a unix socket (about 107 bytes): then in a directory
    of its own in the temp dir (which the agent makes private, as it does a default log dir)."""
    path = log_dir / "git.sock"
    if len(os.fsencode(path)) < 100:
        return path
    import hashlib
    import tempfile

    digest = hashlib.sha256(os.fsencode(log_dir)).hexdigest()[:16]
    # The temp dir may itself be deep (a daemon's TMPDIR in its cache dir): then /tmp.
    for temp_dir in (tempfile.gettempdir(), "/tmp"):  # noqa: S108 - a private directory is made there
        path = Path(temp_dir) / f"slipway-git-{digest}" / "git.sock"
        if len(os.fsencode(path)) < 100:
            return path
    return path


def helper_environment(access: HelperAccess, bin_dir: Path) -> dict[str, str]:
    """What every script and session gets: the socket and its secret, and git's hooks pointing at the wrappers."""
    return {
        SOCKET_VARIABLE: str(access.socket_path),
        SECRET_VARIABLE: access.secret,
        "GIT_ASKPASS": str(bin_dir / ASKPASS_NAME),
        "GIT_SSH_COMMAND": str(bin_dir / GITSSH_NAME),
    }


def write_wrappers(bin_dir: Path, python: str = sys.executable) -> None:
    """Small scripts in the agent's bin directory (on every session's PATH) that run this module with the
    agent's own interpreter; ``slipway`` too when the workspace has no Slipway CLI of its own."""
    import shlex
    import shutil

    bin_dir.mkdir(parents=True, exist_ok=True)
    code_root = str(Path(__file__).resolve().parent.parent)
    prefix = f"PYTHONPATH={shlex.quote(code_root)}${{PYTHONPATH:+:$PYTHONPATH}} exec {shlex.quote(python)} -m agent.git"
    wrappers = {ASKPASS_NAME: f'{prefix} askpass "$@"', GITSSH_NAME: f'{prefix} ssh "$@"'}
    path_without_bin = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep) if p != str(bin_dir))
    if shutil.which("slipway", path=path_without_bin) is None:
        wrappers["slipway"] = f'{prefix} "$@"'
    for name, command in wrappers.items():
        target = bin_dir / name
        target.write_text(f"#!/bin/sh\n{command}\n")
        target.chmod(0o755)


# In git's processes --------------------------------------------------------------------------------------------


def ask(request: dict[str, Any], socket_path: str | None = None, secret: str | None = None) -> dict[str, Any]:
    """One request to the agent's helper socket; the ``ok`` part of the reply, or :class:`HelperError`."""
    path = socket_path or os.environ.get(SOCKET_VARIABLE, "")
    if not path:
        raise HelperError(f"{SOCKET_VARIABLE} is not set: run this inside a Slipway workspace (an agent's session).")
    signed = {**request, "secret": os.environ.get(SECRET_VARIABLE, "") if secret is None else secret}
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
            connection.settimeout(SOCKET_TIMEOUT)
            connection.connect(path)
            connection.sendall(json.dumps(signed).encode() + b"\n")
            data = b""
            while not data.endswith(b"\n"):
                chunk = connection.recv(65536)
                if not chunk:
                    break
                data += chunk
    except OSError as exc:
        raise HelperError(f"cannot reach the workspace agent at {path}: {exc.strerror or exc}") from None
    try:
        reply = json.loads(data)
    except ValueError:
        raise HelperError("the workspace agent sent an unreadable answer") from None
    if "ok" not in reply:
        raise HelperError(str(reply.get("error") or "the workspace agent refused"))
    result: dict[str, Any] = reply["ok"]
    return result


def token_for(*, match: str = "", provider_id: str = "", wait: bool = True) -> dict[str, Any]:
    """The owner's token; when they have not linked the provider, say where to link it and (``wait``) wait for
    them to do so in a browser."""
    reply = ask({"op": "external-auth", "match": match, "id": provider_id})
    if reply.get("access_token") or not wait:
        return reply
    name = reply.get("display_name") or reply.get("id")
    print(
        f"You have not linked your {name} account. Open this link to do so:\n\n  {reply.get('url')}\n", file=sys.stderr
    )
    print("Waiting for you to link it…", file=sys.stderr)
    for _ in range(LINK_WAIT_ROUNDS):
        reply = ask({"op": "external-auth", "match": match, "id": provider_id, "listen": True})
        if reply.get("access_token"):
            print(f"Linked {name}.", file=sys.stderr)
            return reply
    raise HelperError(f"{name} was not linked in time. Link it at {reply.get('url')} and try again.")


def askpass(prompt: str) -> str:
    """git's GIT_ASKPASS: the username or the password (the token) for the URL in git's prompt."""
    match = _PROMPT.match(prompt.strip())
    if match is None:
        raise HelperError(f"not a prompt git asks for credentials with: {prompt!r}")
    kind, url = match.groups()
    # "https://user@host/..." in the password prompt: the provider is matched on the URL without its user.
    url = re.sub(r"^([a-z][a-z0-9+.-]*://)[^@/]*@", r"\1", url, flags=re.IGNORECASE)
    reply = token_for(match=url)
    return str(reply["username"] if kind == "Username" else reply["password"])


def git_ssh(arguments: list[str]) -> int:
    """GIT_SSH_COMMAND: ssh with the owner's Git SSH key (kept in a private file only while ssh runs)."""
    import shutil
    import subprocess
    import tempfile

    key = ask({"op": "gitsshkey"})
    ssh = shutil.which("ssh")
    if ssh is None:
        raise HelperError("ssh is not installed in this workspace")
    with tempfile.TemporaryDirectory(prefix="slipway-gitssh-") as directory:
        key_file = Path(directory) / "id_ed25519"
        key_file.touch(mode=0o600)
        key_file.write_text(str(key["private_key"]))
        # accept-new: a provider's host key is remembered the first time (git has no terminal to ask on) and
        # checked every time after; a changed key is still refused.
        options = ["-o", "IdentitiesOnly=yes", "-o", "StrictHostKeyChecking=accept-new", "-o", "BatchMode=yes"]
        command = [ssh, "-i", str(key_file), *options, *arguments]
        return subprocess.call(command)  # noqa: S603 - git's own ssh arguments, to the system's ssh


def access_token(provider_id: str, extra: str | None) -> str:
    """``slipway external-auth access-token <id> [--extra FIELD]``: for scripts (prints nothing else)."""
    reply = token_for(provider_id=provider_id, wait=False)
    if not reply.get("access_token"):
        raise HelperError(f"Link your {reply.get('display_name') or provider_id} account first: {reply.get('url')}")
    if extra:
        fields = reply.get("token_extra") or {}
        if extra not in fields:
            raise HelperError(f"the token has no extra field {extra!r} (it has: {', '.join(sorted(fields)) or 'none'})")
        return str(fields[extra])
    return str(reply["access_token"])


USAGE = """usage: slipway gitaskpass PROMPT | gitssh ARGS… | external-auth access-token ID [--extra FIELD]"""


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        if args[:1] in (["askpass"], ["gitaskpass"]) and len(args) >= 2:
            print(askpass(args[1]))
            return 0
        if args[:1] in (["ssh"], ["gitssh"]):
            return git_ssh(args[1:])
        if args[:2] == ["external-auth", "access-token"] and len(args) >= 3:
            extra = args[args.index("--extra") + 1] if "--extra" in args[:-1] else None
            print(access_token(args[2], extra))
            return 0
    except HelperError as exc:
        print(f"slipway: {exc}", file=sys.stderr)
        return 1
    print(USAGE, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
