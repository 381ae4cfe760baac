"""Git providers: how long git waits for a token in a workspace (the GIT_ASKPASS round trip), fresh and refreshing.

A real `slipway server` (SQLite, embedded Redis, built-in daemons) with two Git providers, each a real OpenID
provider (tests/oidc, npm oidc-provider): `fresh` issues hour-long access tokens, so the server hands out the
stored one; `refreshing` issues one-minute tokens, inside the 5-minute refresh margin, so every request refreshes
at the provider first. One person links both through the real OAuth flow; a workspace of examples/local runs the
real agent. Then, 200 times each:

- **round trip**: one request on the agent's helper socket, as git's helper makes it: workspace -> agent ->
  server (agent token, database, provider when refreshing) -> token. Target: p99 <= 50 ms when fresh.
- **helper process**: the `slipway-gitaskpass` wrapper git runs (a Python start-up, then the same round trip).

Run: .venv/bin/python bench/gitaskpass.py [--calls 200]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))
from _harness import OWNER_PASSWORD, Server, median, percentile, sign_up_owner  # noqa: E402
from tunnel import EXAMPLE, create_until_ready, kill_leftovers, push_template  # noqa: E402

from agent import git  # noqa: E402
from tests.support.oidc import OidcProvider, git_provider_client, provider_sign_in  # noqa: E402

PROVIDERS = {"fresh": 3600, "refreshing": 60}  # id -> access token lifetime at its provider (seconds)
SECRET_FILE = "bench-git-secret"
# The helper answers only its own workspace's processes (the secret in their environment): a start script hands
# the benchmark that secret, as a process of the workspace would have it.
SECRET_SCRIPT = f"""
resource "coder_script" "git_secret" {{
  agent_id     = coder_agent.main.id
  display_name = "Git helper secret for the benchmark"
  run_on_start = true
  script       = "printenv SLIPWAY_AGENT_GIT_SECRET > .slipway-agent/{SECRET_FILE}"
}}
"""


def template_with_secret_file(directory: Path) -> Path:
    shutil.copytree(EXAMPLE, directory)
    with (directory / "main.tf").open("a") as main_tf:
        main_tf.write(SECRET_SCRIPT)
    return directory  # id -> access token lifetime at its provider (seconds)


def provider_env(number: int, provider_id: str, idp: OidcProvider) -> dict[str, str]:
    fields = {
        "ID": provider_id, "TYPE": "oauth2", "CLIENT_ID": f"bench-{provider_id}", "CLIENT_SECRET": "bench-secret",
        "AUTH_URL": f"{idp.issuer}/auth", "TOKEN_URL": f"{idp.issuer}/token", "VALIDATE_URL": f"{idp.issuer}/me",
        "SCOPES": "openid", "REGEX": rf"^https://{provider_id}\.git\.test(/.*)?$",
    }  # fmt: skip
    return {f"SLIPWAY_EXTERNAL_AUTH_{number}_{key}": value for key, value in fields.items()}


def link(url: str, provider_id: str) -> None:
    """Sign in at Slipway's login form, then link the provider through its real authorization flow."""
    with httpx.Client(base_url=url, timeout=30) as browser:
        token = re.search(r'name="csrf_token" value="([^"]+)"', browser.get("/login").text)
        assert token, "no CSRF token on the login page"
        browser.post("/login", data={"email": "a@example.com", "password": OWNER_PASSWORD, "csrf_token": token[1]})
        start = browser.get(f"/external-auth/{provider_id}")
        assert start.status_code == 302, start.text
        with httpx.Client(follow_redirects=False, timeout=30) as at_provider:
            callback = provider_sign_in(at_provider, start.headers["location"], f"bench-{provider_id}", url)
        done = browser.get(callback.removeprefix(url))
        assert done.status_code == 302 and "account" in done.headers["location"], done.text


def timed(call: Callable[[], object], count: int) -> list[float]:
    call()  # warm-up: connections, caches
    samples = []
    for _ in range(count):
        began = time.perf_counter()
        call()
        samples.append((time.perf_counter() - began) * 1000)
    return samples


def line(label: str, samples: list[float]) -> str:
    return (
        f"  {label:<34} p50 {median(samples):7.1f} ms   p99 {percentile(samples, 0.99):7.1f} ms"
        f"   max {max(samples):7.1f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="slipway-bench-gitaskpass-"))
    scratch.chmod(0o755)  # the built-in daemons' user (as root: slipway-provisioner) makes workspaces in it
    workspaces_root = scratch / "workspaces"
    workspaces_root.mkdir()
    workspaces_root.chmod(0o777)
    server = Server(extra_args=("--provisioner-daemons", "1"))
    idps = {}
    try:
        for number, (provider_id, ttl) in enumerate(PROVIDERS.items()):
            client = git_provider_client(server.url, provider_id, f"bench-{provider_id}", "bench-secret")
            idp = OidcProvider(server.url, {}, log_path=scratch / f"{provider_id}.log", extra_clients=[client],
                               access_token_ttl=ttl)  # fmt: skip
            idps[provider_id] = idp.start()
            server.env.update(provider_env(number, provider_id, idp))
        server.start()
        api, _ = sign_up_owner(server.url)
        for provider_id in PROVIDERS:
            link(server.url, provider_id)
        template_id = push_template(api, workspaces_root, template_with_secret_file(scratch / "template"))
        startup = create_until_ready(api, template_id, "gitbench")
        print(f"workspace ready in {startup.ready:.1f} s; {args.calls} calls each, after one warm-up call\n")
        log_dir = next(workspaces_root.rglob(".slipway-agent"))
        socket_path = str(git.socket_path_for(log_dir))
        secret = (log_dir / SECRET_FILE).read_text().strip()
        askpass = str(log_dir / "coder-script-data" / "bin" / git.ASKPASS_NAME)
        env = {"PATH": os.environ["PATH"], git.SOCKET_VARIABLE: socket_path, git.SECRET_VARIABLE: secret}
        for provider_id in PROVIDERS:
            url = f"https://{provider_id}.git.test"
            request = {"op": "external-auth", "match": url}
            first = git.ask(request, socket_path, secret)["access_token"]
            round_trips = timed(lambda request=request: git.ask(request, socket_path, secret), args.calls)
            changed = first != git.ask(request, socket_path, secret)["access_token"]
            prompt = f"Password for '{url}': "
            processes = timed(
                lambda prompt=prompt: subprocess.run([askpass, prompt], env=env, capture_output=True, check=True),
                args.calls,
            )
            print(f"{provider_id} (token lifetime {PROVIDERS[provider_id]} s; token changed between calls: {changed})")
            print(line("round trip (helper socket)", round_trips))
            print(line("helper process (slipway-gitaskpass)", processes))
        print(f"\ntarget: round trip p99 <= 50 ms when fresh; load average {os.getloadavg()[0]:.2f}")
    finally:
        kill_leftovers(workspaces_root)
        server.stop()
        for idp in idps.values():
            idp.stop()


if __name__ == "__main__":
    main()
