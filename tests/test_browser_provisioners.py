"""An admin watching the Provisioners page in a real browser while daemons come, take work and keys are made."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page

from tests.conftest import PASSWORD
from tests.support.browser import ARTIFACTS, browser_page, sign_in_page
from tests.support.http_daemon import HttpDaemon, api_client, sign_up_owner
from tests.support.provisionerd import DAEMON_PSK, push_import
from tests.support.server import ServerProcess


@pytest.fixture
def page() -> Iterator[Page]:
    with browser_page() as opened:
        yield opened


def test_the_provisioners_page_follows_daemons_and_jobs_live(page: Page, tmp_path: Path) -> None:
    with (
        ServerProcess(
            tmp_path / "data", "--provisioner-daemons", "0", env={"SLIPWAY_PROVISIONER_DAEMON_PSK": DAEMON_PSK}
        ) as server,
        api_client(server.url, sign_up_owner(server.url, PASSWORD)) as api,
    ):
        sign_in_page(page, server.url)
        page.goto(f"{server.url}/provisioners")
        page.wait_for_selector("text=No daemon has connected yet")
        page.evaluate("window.notReloaded = true")

        version = push_import(api, {"gpu": "a100"})
        pending_row = f"#pending-jobs tr[data-job='{version['job']['id']}']"
        page.wait_for_selector(f"{pending_row} >> text=no provisioner matches tags", timeout=15_000)

        # The import's own page says why it waits, and changes once a daemon that can take it is online.
        import_page = page.context.new_page()
        import_page.goto(f"{server.url}/templates/versions/{version['id']}")
        import_page.wait_for_selector("text=No provisioner matches tags gpu=a100")
        import_page.screenshot(path=str(ARTIFACTS / "import-no-matching-provisioner.png"), full_page=True)

        daemon = HttpDaemon(server.url, DAEMON_PSK, name="gpu-box-1", tags={"gpu": "a100"})
        try:
            page.wait_for_selector("#daemon-table tr[data-daemon='gpu-box-1'] .daemon-idle", timeout=15_000)
            page.wait_for_selector(f"{pending_row} >> text=position 1 of 1", timeout=15_000)
            import_page.wait_for_selector("text=Queued, position 1 of 1", timeout=15_000)

            assert daemon.call(f"/jobs/{version['job']['id']}/acquire").status_code == 200
            page.wait_for_selector(f"#running-jobs tr[data-job='{version['job']['id']}']", timeout=15_000)
            page.wait_for_selector("#daemon-table tr[data-daemon='gpu-box-1'] .daemon-busy", timeout=15_000)
            assert page.evaluate("window.notReloaded")
            page.screenshot(path=str(ARTIFACTS / "provisioners-busy.png"), full_page=True)

            page.click(f"#running-jobs tr[data-job='{version['job']['id']}'] button")
            page.wait_for_selector("text=is canceling")
        finally:
            daemon.close()

        page.fill("input[name=name]", "eu-pool")
        page.fill("input[name=tags]", "region=eu")
        page.click("#keys button[type=submit]")
        secret = page.locator("#new-key").inner_text().strip()
        assert len(secret) == 43
        assert page.locator("#key-table >> text=eu-pool").count() == 1
        page.screenshot(path=str(ARTIFACTS / "provisioners-key-created.png"), full_page=True)
        page.reload()
        assert secret not in page.content()  # shown once
