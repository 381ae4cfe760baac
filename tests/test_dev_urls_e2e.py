"""Dev URLs end to end: one real server with `--wildcard-access-url '*.localhost:PORT'` (the dashboard itself on
http://localhost:PORT, so every app host is a subdomain of it), the `local` example plus two subdomain apps: a
plain site with absolute links served by Python's http.server inside the workspace, and JupyterLab (PyPI) as
Coder's jupyterlab module runs it for a subdomain app; and real Chromium (which resolves *.localhost to
loopback). Screenshots go to test-artifacts/."""

from __future__ import annotations

import struct
import sys
import zlib
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.support.browser import ARTIFACTS, browser_page, sign_in_page, watch_for_problems
from tests.support.daemon_user import daemon_writable_dir
from tests.support.deployment import Deployment, stop_workspaces
from tests.support.jupyter import new_notebook_answers_and_reconnects
from tests.support.net import free_port
from tests.support.server import ServerProcess
from tests.support.site_template import local_with_site_app

# Absolute links, as real sites have them: behind a path proxy each would miss the app.
INDEX = """<!doctype html><html><head><title>plain site</title><link rel="stylesheet" href="/style.css"></head>
<body><h1>Plain site</h1><img id="logo" src="/img.png" alt="logo" width="40" height="40">
<p><a id="next" href="/next.html">next page</a></p></body></html>"""
NEXT = """<!doctype html><title>next</title><link rel="stylesheet" href="/style.css"><p id="arrived">arrived</p>"""
STYLE = "body { background-color: rgb(0, 128, 0); }"
SITE_SERVER = """
import functools, http.server, sys
handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory="site")
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), handler).serve_forever()
"""


def jupyter_app(port: int) -> str:
    """JupyterLab as Coder's module starts it for a subdomain app: no base URL, no token, no password. Coder's
    module listens on ``ip='*'``, which turns on Jupyter's ``allow_remote_access`` (it refuses a Host that is not
    local otherwise, such as the app host); here it listens on loopback, the test machine being shared, and turns
    that on by name. Its healthcheck asks for a 2xx from the API (README "App health")."""
    flags = (
        f"--no-browser --ServerApp.ip=127.0.0.1 --ServerApp.port={port} --ServerApp.allow_remote_access=True "
        "--ServerApp.token='' --ServerApp.password=''"
    )
    return f"""
resource "coder_script" "jupyterlab" {{
  agent_id     = coder_agent.main.id
  display_name = "jupyterlab"
  run_on_start = true
  script       = "{sys.executable} -m jupyterlab {flags} > jupyterlab.log 2>&1 &"
}}

resource "coder_app" "jupyter" {{
  agent_id     = coder_agent.main.id
  slug         = "jupyter"
  display_name = "JupyterLab"
  url          = "http://localhost:{port}"
  subdomain    = true
  share        = "owner"
  healthcheck {{
    url       = "http://localhost:{port}/api/status#expect=2xx"
    interval  = 2
    threshold = 10
  }}
}}
"""


def png() -> bytes:
    """A 2x2 red PNG."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack("!I", len(data)) + kind + data + struct.pack("!I", zlib.crc32(kind + data))

    rows = b"".join(b"\x00" + b"\xff\x00\x00" * 2 for _ in range(2))
    header = struct.pack("!IIBBBBB", 2, 2, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


class DevUrls:
    def __init__(self, deployment: Deployment, dev_port: int) -> None:
        self.deployment, self.dev_port = deployment, dev_port
        self.port = deployment.server.port
        self.dashboard = f"http://localhost:{self.port}"

    def app_url(self, first: str) -> str:
        return f"http://{first}--main--site--alice.localhost:{self.port}/"

    def share(self, level: str) -> None:
        workspace = self.deployment.workspace("alice", "site")
        with self.deployment.api("alice") as api:
            reply = api.post(
                f"/workspaces/{workspace['id']}/port-share",
                json={"agent_name": "main", "port": self.dev_port, "share_level": level},
            )
            assert reply.status_code == 200, reply.text


@pytest.fixture(scope="module")
def dev_urls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevUrls]:
    tmp = tmp_path_factory.mktemp("dev-urls")
    workspaces_root = daemon_writable_dir("workspaces")
    server = ServerProcess(tmp / "data", "--provisioner-daemons", "2", env={"SLIPWAY_AGENT_HEARTBEAT_INTERVAL": "1s"})
    # The wildcard and the access URL name the port the server was given (chosen before it starts).
    server.env["SLIPWAY_WILDCARD_ACCESS_URL"] = f"*.localhost:{server.port}"
    server.env["SLIPWAY_ACCESS_URL"] = f"http://localhost:{server.port}"
    server.start(server.start_timeout)
    try:
        assert server.env["SLIPWAY_ACCESS_URL"].endswith(f":{server.port}"), "the server moved to another port"
        deployment = Deployment(server, tmp, workspaces_root).sign_up()
        template = local_with_site_app(tmp / "template")
        (template / "jupyter_app.tf").write_text(jupyter_app(free_port()))
        pushed = deployment.cli(
            "alice",
            "templates",
            "push",
            "local",
            "-d",
            str(template),
            "--variable",
            f"workspaces_root={workspaces_root}",
        )
        assert pushed.returncode == 0, pushed.stdout + pushed.stderr
        with deployment.api("alice") as api:
            template_id = api.get("/templates").json()[0]["id"]
            assert api.patch(f"/templates/{template_id}", json={"max_port_share_level": "public"}).status_code == 200
        dev_port = free_port()
        deployment.create("alice", "site", f"dev_port={dev_port}")
        deployment.wait_ready("alice", "site")
        site = deployment.directory("alice", "site") / "site"
        site.mkdir()
        for name, content in (("index.html", INDEX), ("next.html", NEXT), ("style.css", STYLE)):
            (site / name).write_text(content)
        (site / "img.png").write_bytes(png())
        deployment.start_server("alice", "site", SITE_SERVER, dev_port)
        yield DevUrls(deployment, dev_port)
    finally:
        server.stop()
        stop_workspaces(workspaces_root)


def assert_site_works(page: Page, url: str, shot: str) -> None:
    """The page, its stylesheet and its image all loaded from the app's own origin, and its absolute link works."""
    page.goto(url)
    page.wait_for_selector("#logo")
    assert page.url.startswith(url), page.url  # back on the app host, the one-time code gone from the address
    assert "slipway_app_code" not in page.url
    assert page.evaluate("getComputedStyle(document.body).backgroundColor") == "rgb(0, 128, 0)"
    page.wait_for_function("document.getElementById('logo').complete")
    assert page.evaluate("document.getElementById('logo').naturalWidth") == 2
    page.screenshot(path=str(ARTIFACTS / shot))
    page.click("#next")
    page.wait_for_selector("#arrived")
    assert page.url == url + "next.html"


def test_a_subdomain_app_and_a_port_url_serve_a_site_with_absolute_links(dev_urls: DevUrls) -> None:
    with browser_page() as page:
        sign_in_page(page, dev_urls.dashboard)
        page.wait_for_url(f"{dev_urls.dashboard}/**")
        assert_site_works(page, dev_urls.app_url("site"), "dev-urls-subdomain-app.png")
        assert_site_works(page, dev_urls.app_url(str(dev_urls.dev_port)), "dev-urls-port-url.png")
        # The workspace page lists the port with its port URL.
        workspace = dev_urls.deployment.workspace("alice", "site")
        page.goto(f"{dev_urls.dashboard}/workspaces/{workspace['id']}")
        link = page.locator(f"a.port-link[href='{dev_urls.app_url(str(dev_urls.dev_port))}']")
        link.wait_for(timeout=30_000)  # the agent reports its ports every 2 s
        # The page, not the table: the agent's panel is redrawn whenever what it shows changes (the example's
        # load average every 5 s, JupyterLab starting meanwhile), which detaches any element located inside it.
        page.screenshot(path=str(ARTIFACTS / "dev-urls-ports.png"), full_page=True)


def test_an_app_origin_cannot_read_or_set_the_dashboards_cookies(dev_urls: DevUrls) -> None:
    with browser_page() as page:
        sign_in_page(page, dev_urls.dashboard)
        page.wait_for_url(f"{dev_urls.dashboard}/**")
        context = page.context
        before = {c["name"]: c for c in context.cookies(dev_urls.dashboard)}
        assert before["slipway_session"]["domain"] == "localhost"  # host-only: no leading dot
        page.goto(dev_urls.app_url("site"))
        page.wait_for_selector("#logo")
        seen = page.evaluate("document.cookie")
        assert "slipway_session" not in seen and "slipway_app_session" not in seen  # HttpOnly, and not sent here
        # Try to plant cookies on the dashboard: for the parent domain, and with the app host's own scope.
        page.evaluate(
            """() => {
                document.cookie = "slipway_session=planted; domain=localhost; path=/";
                document.cookie = "slipway_session=planted; domain=.localhost; path=/login";
                document.cookie = "session=planted; domain=localhost; path=/";
                document.cookie = "slipway_session=planted; path=/";
            }"""
        )
        after = {(c["name"], c["value"]) for c in context.cookies(dev_urls.dashboard)}
        assert ("slipway_session", before["slipway_session"]["value"]) in after
        assert all(value != "planted" for _, value in after), after
        page.goto(f"{dev_urls.dashboard}/workspaces")
        assert "/login" not in page.url  # still signed in as before
        page.screenshot(path=str(ARTIFACTS / "dev-urls-cookies.png"))


def test_shared_ports_open_per_their_level(dev_urls: DevUrls) -> None:
    port_url = dev_urls.app_url(str(dev_urls.dev_port))
    with browser_page() as page:
        browser = page.context.browser
        assert browser is not None
        dev_urls.share("authenticated")
        sign_in_page(page, dev_urls.dashboard, "carol@example.com")
        page.wait_for_url(f"{dev_urls.dashboard}/**")
        assert_site_works(page, port_url, "dev-urls-shared-authenticated.png")
        visitor = browser.new_context().new_page()
        visitor.goto(port_url)
        visitor.wait_for_url(f"{dev_urls.dashboard}/login**")  # a signed-out visitor is sent to sign in
        # Without a browser: the app host answers with the way to sign in, never the app.
        reply = httpx.get(f"http://127.0.0.1:{dev_urls.port}/", headers={"Host": port_url.split("/")[2]})
        assert reply.status_code == 302 and "/api/v2/applications/auth-redirect" in reply.headers["Location"]
        dev_urls.share("public")
        assert_site_works(visitor, port_url, "dev-urls-shared-public.png")
        visitor.context.close()
    dev_urls.share("owner")


def test_an_unknown_app_host_gets_an_error_page_not_the_dashboard(dev_urls: DevUrls) -> None:
    for host in (f"nothing.localhost:{dev_urls.port}", f"nope--main--site--alice.localhost:{dev_urls.port}"):
        reply = httpx.get(f"http://127.0.0.1:{dev_urls.port}/login", headers={"Host": host})
        assert reply.status_code in (302, 404), reply.status_code
        if reply.status_code == 404:
            assert "no app" in reply.text.lower() and "password" not in reply.text.lower()
        else:  # an app host that may exist: signing in comes first (whoever may not see it learns nothing)
            assert reply.headers["Location"].startswith(f"{dev_urls.dashboard}/api/v2/applications/auth-redirect")


def jupyter_healthy(agent: dict[str, Any]) -> bool:
    return any(app["slug"] == "jupyter" and app["health"] == "healthy" for app in agent["apps"])


@pytest.mark.browser
def test_jupyterlab_runs_a_notebook_as_a_subdomain_app_and_reconnects_after_a_reload(dev_urls: DevUrls) -> None:
    """Last in the module: JupyterLab starts with the workspace, and the other tests run while it does."""
    dev_urls.deployment.wait_agent("alice", "site", jupyter_healthy, 180, "serving JupyterLab")
    with browser_page() as page:
        problems = watch_for_problems(page.context, dev_urls.app_url("jupyter").rstrip("/"))
        sign_in_page(page, dev_urls.dashboard)
        page.wait_for_url(f"{dev_urls.dashboard}/**")
        page.goto(dev_urls.app_url("jupyter"))  # signed in on the app host through the code exchange
        expect(page).to_have_url(f"{dev_urls.app_url('jupyter')}lab", timeout=60_000)
        new_notebook_answers_and_reconnects(page, "jupyterlab-subdomain-app", str(ARTIFACTS))
        assert not [problem for problem in problems if "Failed to load resource" in problem or "403" in problem]
