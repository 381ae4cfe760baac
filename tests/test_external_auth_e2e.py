"""Git providers end to end, all real: `slipway server` with built-in daemons and real Terraform, an OAuth2 /
OpenID provider (oidc-provider, short-lived access tokens with refresh) configured as the generic type, and a
private Git server over smart HTTP that only lets in valid, unexpired tokens of that provider.

A person links the provider in a real browser; a template declares `data "coder_external_auth"`; its start
build reads the private repository with the token Terraform got; the workspace's startup script runs plain
`git clone` and `git push` through the agent's GIT_ASKPASS; later, once that token has expired, a push from an
SSH session gets a refreshed one; unlinking in the browser leaves the workspace asking to link again.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from playwright.sync_api import expect

from tests.support.browser import ARTIFACTS, browser_page, sign_in_page, watch_for_problems
from tests.support.daemon_user import daemon_writable_dir
from tests.support.deployment import EXAMPLE, Deployment, stop_workspaces
from tests.support.git_server import GitServer
from tests.support.git_ssh_server import GitSSHServer
from tests.support.oidc import OidcProvider, git_provider_client
from tests.support.server import ServerProcess
from tests.support.waiting import wait_until

BUILD_TIMEOUT = 180.0
# Short enough that the test sees a token expire and be refreshed, long enough for a build to use its token.
ACCESS_TOKEN_TTL = 45
TEMPLATE_ADDITIONS = """
variable "git_url" {
  type        = string
  description = "The private repository every workspace clones."
}

data "coder_external_auth" "idp" {
  id = "idp"
}

# Terraform itself uses the person's token: the start build reads the private repository with it.
resource "terraform_data" "repository_check" {
  count = data.coder_workspace.me.start_count
  provisioner "local-exec" {
    environment = {
      TOKEN = data.coder_external_auth.idp.access_token
      URL   = var.git_url
    }
    command = <<-EOT
      authed=$(printf '%s' "$URL" | sed "s#://#://oauth2:$TOKEN@#")
      GIT_TERMINAL_PROMPT=0 git -c credential.helper= ls-remote "$authed" > /dev/null
    EOT
  }
}

# Plain git in the workspace: no token anywhere, GIT_ASKPASS asks the agent.
resource "coder_script" "clone" {
  agent_id     = coder_agent.main.id
  display_name = "Clone"
  run_on_start = true
  script       = <<-EOT
    set -e
    git clone -q "${var.git_url}" repo
    cd repo
    echo "pushed from ${data.coder_workspace.me.name}" >> log.txt
    git add log.txt
    git -c user.name=Workspace -c user.email=ws@example.com commit -qm "from the workspace"
    git push -q origin HEAD:main
  EOT
}
"""


@dataclass
class World:
    deployment: Deployment
    idp: OidcProvider
    git: GitServer

    @property
    def repository(self) -> str:
        return f"{self.git.url}/private.git"


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    tmp = tmp_path_factory.mktemp("git-providers")
    workspaces_root = daemon_writable_dir("workspaces")
    server = ServerProcess(tmp / "data", "--provisioner-daemons", "2", env={"SLIPWAY_AGENT_HEARTBEAT_INTERVAL": "1s"})
    client = git_provider_client(server.url, "idp", "slipway-git", "git-secret")
    with (
        OidcProvider(
            server.url, {}, log_path=tmp / "idp.log", extra_clients=[client], access_token_ttl=ACCESS_TOKEN_TTL
        ) as idp,
        GitServer(tmp / "git", f"{idp.issuer}/me") as git,
    ):
        git.create_repository("private.git")
        config = tmp / "git-providers.yaml"
        config.write_text(
            "external_auth:\n"
            "  - id: idp\n    type: oauth2\n    display_name: Team Git\n"
            f"    client_id: {client['client_id']}\n    client_secret_file: {tmp / 'client-secret'}\n"
            f"    auth_url: {idp.issuer}/auth\n    token_url: {idp.issuer}/token\n"
            f"    validate_url: {idp.issuer}/me\n    revoke_url: {idp.issuer}/token/revocation\n"
            "    scopes: [openid, profile]\n"
            f"    regex: '^http://127\\.0\\.0\\.1:{git.port}(/.*)?$'\n"
        )
        (tmp / "client-secret").write_text(str(client["client_secret"]))
        server.env["SLIPWAY_EXTERNAL_AUTH_CONFIG"] = str(config)
        server.start(90)
        deployment = Deployment(server, tmp, workspaces_root).sign_up()
        try:
            template = tmp / "gitrepo"
            shutil.copytree(EXAMPLE, template)
            with (template / "main.tf").open("a") as main_tf:
                main_tf.write(TEMPLATE_ADDITIONS)
            pushed = deployment.cli(
                "alice", "templates", "push", "gitrepo", "-d", str(template),
                "--variable", f"workspaces_root={workspaces_root}",
                "--variable", f"git_url={git.url}/private.git",
            )  # fmt: skip
            assert pushed.returncode == 0, pushed.stdout + pushed.stderr
            yield World(deployment, idp, git)
        finally:
            server.stop()
            stop_workspaces(workspaces_root)


def ssh(world: World, command: str) -> tuple[int, str]:
    result = world.deployment.cli("carol", "ssh", "repo-ws", command, timeout=180)
    return result.returncode, result.stdout + result.stderr


def test_link_in_a_browser_then_git_in_the_workspace_clones_and_pushes_refreshes_and_unlinks(world: World) -> None:
    deployment, git = world.deployment, world.git
    # Before linking, creating a workspace is refused at once, naming the provider and where to link it.
    refused = deployment.cli("carol", "create", "repo-ws", "-t", "gitrepo")
    assert refused.returncode != 0
    assert "external_auth.idp" in refused.stdout + refused.stderr
    assert f"{deployment.url}/external-auth/idp" in refused.stdout + refused.stderr
    with deployment.api("carol") as api:
        assert api.get("/workspaces", params={"owner": "me"}).json() == []

    with browser_page() as page:
        problems = watch_for_problems(page.context, origin=deployment.url)
        sign_in_page(page, deployment.url, "carol@example.com")
        page.goto(f"{deployment.url}/account")
        row = page.locator("#git-providers tr[data-provider=idp]")
        expect(row).to_contain_text("not linked")
        row.get_by_role("link", name="Link", exact=True).click()
        page.wait_for_selector("input[name=login]")  # the provider's own sign-in page
        page.fill("input[name=login]", "carol-at-git")
        page.fill("input[name=password]", "any-password")
        page.click("button[type=submit]")
        page.wait_for_url(f"{deployment.url}/account#git-providers")
        expect(page.locator(".flash-success")).to_contain_text("Linked your Team Git account")
        expect(row).to_contain_text("linked")
        expect(row.get_by_role("button", name="Unlink")).to_be_visible()
        page.screenshot(path=str(ARTIFACTS / "git-providers-linked.png"), full_page=True)

        # Linked: the workspace builds, Terraform reads the repository, the startup script clones and pushes.
        created = deployment.cli("carol", "create", "repo-ws", "-t", "gitrepo")
        assert created.returncode == 0, created.stdout + created.stderr
        deployment.wait_ready("carol", "repo-ws", timeout=BUILD_TIMEOUT)
        wait_until(lambda: "from the workspace" in git.log("private.git"), 60, "the workspace's push")
        build = deployment.workspace("carol", "repo-ws")["latest_build"]
        log = deployment.cli("carol", "logs", "repo-ws").stdout
        # The check fails the build unless git got in with Terraform's token; Terraform hides its output, since
        # the command's environment holds a sensitive value.
        assert "repository_check[0]: (local-exec) Provisioning complete" in log, log
        assert "(output suppressed due to sensitive value in config)" in log
        assert build["job"]["status"] == "succeeded"
        first_token = git.accepted_tokens[-1]
        assert all(token not in log for token in git.accepted_tokens)

        # Once that token has expired at the provider, git in a session gets a refreshed one.
        wait_until(lambda: not git.token_valid(first_token), ACCESS_TOKEN_TTL + 60, "the first token to expire")
        code, output = ssh(
            world,
            "cd repo && echo again >> log.txt && git -c user.name=W -c user.email=w@example.com commit -qam again"
            " && git push -q origin HEAD:main && echo pushed-again",
        )
        assert code == 0 and "pushed-again" in output, output
        assert git.log("private.git")[0] == "again" and git.accepted_tokens[-1] != first_token

        # For scripts: the token, and a field of the token response.
        code, output = ssh(world, "slipway external-auth access-token idp")
        assert code == 0 and git.token_valid(output.strip().splitlines()[-1]), output
        code, output = ssh(world, "slipway external-auth access-token idp --extra token_type")
        assert code == 0 and output.strip().splitlines()[-1] == "Bearer", output
        # A remote no provider serves: a clear message, non-zero.
        code, output = ssh(world, "slipway-gitaskpass \"Username for 'https://nowhere.example': \"")
        assert code != 0 and "No Git provider on this server serves https://nowhere.example" in output, output

        # Over SSH, git uses the person's Git SSH key (GIT_SSH_COMMAND): a server that knows only its public half.
        with deployment.api("carol") as api:
            public_key = api.get("/users/me/gitsshkey").json()["public_key"]
        with GitSSHServer(git.root, public_key) as ssh_git:
            code, output = ssh(
                world, f"git clone -q {ssh_git.url('private.git')} over-ssh && git -C over-ssh log -1 --format=%s"
            )
            assert code == 0 and "again" in output.splitlines(), output
            assert ssh_git.commands == ["git-upload-pack '/private.git'"]

        # Unlink in the browser: the workspace is told where to link again.
        page.goto(f"{deployment.url}/account")
        row.get_by_role("button", name="Unlink").click()
        expect(page.locator(".flash-success")).to_contain_text("Unlinked Team Git")
        expect(row).to_contain_text("not linked")
        code, output = ssh(world, "slipway external-auth access-token idp")
        assert code == 1 and f"{deployment.url}/external-auth/idp" in output, output
        assert problems == []
