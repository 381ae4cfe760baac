"""A workspace's life after create, end to end: a real server whose executor is off (`--lifecycle-interval 0`),
driven by `run_tick(now)` from the test with a clock the test moves, and real Terraform builds of the `local`
example run by the server's daemons; people use the CLI (`schedule`, `update`, `restart`, `templates edit`)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from playwright.sync_api import expect
from sqlalchemy import update

from app.core.config import load_settings
from app.core.extensions import db
from app.factory import create_app
from app.lifecycle.executor import TickReport, run_tick
from app.lifecycle.models import LifecycleTick
from tests.conftest import close_app
from tests.support.browser import ARTIFACTS, browser_page, sign_in_page, watch_for_problems
from tests.support.deployment import EXAMPLE, Deployment, running_deployment
from tests.support.net import free_port
from tests.support.notifications import SECRET, Receiver
from tests.support.templates import FAILING_START_TEMPLATE
from tests.support.waiting import wait_until

BUILD_TIMEOUT = 180.0
# What the browser test's new version adds: a parameter without a default, so updating needs a value for it.
TEAM_PARAMETER = """
data "coder_parameter" "team" {
  name    = "team"
  type    = "string"
  mutable = true
}
"""


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    """Where the deployment's notification worker POSTs its webhooks."""
    endpoint = Receiver(free_port())
    endpoint.start()
    yield endpoint
    endpoint.stop()


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory, receiver: Receiver) -> Iterator[Deployment]:
    tmp = tmp_path_factory.mktemp("lifecycle")
    env = {
        "SLIPWAY_ACTIVITY_FLUSH_INTERVAL": "1",
        "SLIPWAY_NOTIFICATIONS_WEBHOOK_URL": f"http://127.0.0.1:{receiver.port}/hook",
        "SLIPWAY_NOTIFICATIONS_WEBHOOK_SECRET": SECRET,
    }
    with running_deployment(tmp, "--lifecycle-interval", "0", env=env) as deployment:
        deployment.push_local()
        yield deployment


@pytest.fixture(scope="module")
def executor_app(deployment: Deployment) -> Iterator[Flask]:
    """The server's own database and Redis, for ticks with the test's clock."""
    data_dir = deployment.server.data_dir
    settings = load_settings({"SLIPWAY_DATA_DIR": str(data_dir), "SLIPWAY_REDIS_URL": deployment.server.redis_url})
    app = create_app(settings)
    yield app
    close_app(app)


def tick(app: Flask, at: datetime) -> TickReport:
    """A tick at ``at``; the test's clock jumps back and forth, so the last minute acted on is forgotten first."""
    with app.app_context():
        try:
            db.session.execute(update(LifecycleTick).values(tick_at=None))
            db.session.commit()
            return run_tick(at)
        finally:
            db.session.remove()


def wait_status(deployment: Deployment, name: str, status: str) -> dict[str, Any]:
    seen: dict[str, Any] = {}

    def reached() -> bool:
        seen.update(deployment.workspace("carol", name))
        return bool(seen["status"] == status)

    wait_until(reached, BUILD_TIMEOUT, f"{name} {status}")
    return seen


def cli_ok(deployment: Deployment, *args: str, input_text: str | None = None) -> str:
    result = deployment.cli("carol", *args, input_text=input_text)
    assert result.returncode == 0, result.stdout + result.stderr
    return str(result.stdout)


def at(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def test_schedules_set_from_the_cli_and_the_executor_stops_and_starts_for_real(
    deployment: Deployment, executor_app: Flask
) -> None:
    edited = deployment.cli("alice", "templates", "edit", "local", "--default-ttl", "2h", "--activity-bump", "30m")
    assert edited.returncode == 0, edited.stderr
    assert "default_ttl_ms" in edited.stdout
    deployment.create("carol", "sched")
    running = wait_status(deployment, "sched", "running")
    deadline = at(running["latest_build"]["deadline"])
    assert (
        timedelta(hours=1, minutes=58)
        < deadline - at(running["latest_build"]["job"]["completed_at"])
        <= timedelta(hours=2)
    )

    assert "Europe/Berlin" in cli_ok(deployment, "schedule", "start", "sched", "9:30AM", "Mon-Fri", "Europe/Berlin")
    assert "after 8h" in cli_ok(deployment, "schedule", "stop", "sched", "8h")
    shown = cli_ok(deployment, "schedule", "show", "sched")
    assert "CRON_TZ=Europe/Berlin 30 9 * * mon-fri" in shown and "8h" in shown
    listed = json.loads(cli_ok(deployment, "list", "-o", "json"))
    mine = next(item for item in listed if item["name"] == "sched")
    assert mine["ttl_ms"] == 8 * 3_600_000 and mine["next_start_at"]
    assert "STOPS-AFTER" in cli_ok(deployment, "list")
    bad = deployment.cli("carol", "schedule", "start", "sched", "9:30AM", "Mon-Fri", "Mars/Olympus")
    assert bad.returncode == 1 and "Unknown time zone" in bad.stderr
    extended = cli_ok(deployment, "schedule", "extend", "sched", "3h")
    assert "stops at" in extended
    # A template that sets the autostop itself: neither a TTL nor an extend of carol's gets through the CLI
    # (tests/test_lifecycle_policies.py runs every rule through the API, the forms and the executor).
    assert deployment.cli("alice", "templates", "edit", "local", "--forbid-user-autostop").returncode == 0
    for refused in (("schedule", "extend", "sched", "3h"), ("schedule", "stop", "sched", "12h")):
        result = deployment.cli("carol", *refused)
        assert result.returncode == 1 and "sets the autostop of its workspaces" in result.stderr, result.stderr
    assert deployment.cli("alice", "templates", "edit", "local", "--allow-user-autostop").returncode == 0

    # The deadline passes: the executor stops it, for real.
    deadline = at(deployment.workspace("carol", "sched")["latest_build"]["deadline"])
    report = tick(executor_app, deadline + timedelta(minutes=1))
    assert [reason for _, reason in report.queued] == ["autostop"]
    stopped = wait_status(deployment, "sched", "stopped")
    assert stopped["latest_build"]["reason"] == "autostop"

    # Its next start comes: started for real on the schedule.
    next_start = at(stopped["next_start_at"])
    report = tick(executor_app, next_start + timedelta(minutes=2))
    assert [reason for _, reason in report.queued] == ["autostart"]
    started = wait_status(deployment, "sched", "running")
    assert started["latest_build"]["reason"] == "autostart"
    assert at(started["next_start_at"]) > next_start


def test_a_failed_start_is_cleaned_up_once_and_its_owner_told(
    deployment: Deployment, executor_app: Flask, tmp_path: Path, receiver: Receiver
) -> None:
    template = tmp_path / "failing"
    template.mkdir()
    (template / "main.tf").write_text(FAILING_START_TEMPLATE)
    pushed = deployment.cli("alice", "templates", "push", "failing", "-d", str(template))
    assert pushed.returncode == 0, pushed.stdout + pushed.stderr
    assert deployment.cli("alice", "templates", "edit", "failing", "--failure-ttl", "10m").returncode == 0
    created = deployment.cli("carol", "create", "broken", "-t", "failing")
    assert created.returncode == 1
    failed = wait_status(deployment, "broken", "failed")
    completed = at(failed["latest_build"]["job"]["completed_at"])
    assert (failed["id"], "failure_cleanup") not in tick(executor_app, completed + timedelta(minutes=5)).queued
    report = tick(executor_app, completed + timedelta(minutes=11))
    assert (failed["id"], "failure_cleanup") in report.queued
    cleaned = wait_status(deployment, "broken", "stopped")
    assert cleaned["latest_build"]["reason"] == "failure_cleanup"
    assert (failed["id"], "failure_cleanup") not in tick(executor_app, completed + timedelta(minutes=30)).queued
    with deployment.api("carol") as api:
        inbox = api.get("/notifications/inbox").json()
    assert any(item["event"] == "build_failed" and "broken" in item["title"] for item in inbox)
    # The server's own notification worker delivered the failure to the webhook, signed.

    def told() -> bool:
        return any(item["event"] == "build_failed" and "broken" in item["title"] for item in receiver.received)

    wait_until(told, 60, "the webhook to receive the build failure")
    assert receiver.received[0]["user"]["username"] == "carol" and receiver.refused == 0


def test_an_open_ssh_session_marks_the_workspace_used_and_pushes_its_autostop(deployment: Deployment) -> None:
    deployment.create("carol", "busy")
    running = wait_status(deployment, "busy", "running")
    deployment.wait_ready("carol", "busy")
    # The template stops workspaces 2 h after a start; open connections push that to 3 h from now.
    edited = deployment.cli("alice", "templates", "edit", "local", "--activity-bump", "3h")
    assert edited.returncode == 0, edited.stderr
    before_deadline, before_use = at(running["latest_build"]["deadline"]), at(running["last_used_at"])
    command = [*ssh_command(deployment), "busy", "sleep 120"]
    with subprocess.Popen(command, env=deployment.cli_env("carol"), stdout=subprocess.DEVNULL) as session:
        try:

            def bumped() -> bool:
                workspace = deployment.workspace("carol", "busy")
                return at(workspace["last_used_at"]) > before_use and at(
                    workspace["latest_build"]["deadline"]
                ) > before_deadline + timedelta(minutes=30)

            wait_until(bumped, 60, "the session to count as use and bump the deadline")
        finally:
            session.kill()
    deadline = at(deployment.workspace("carol", "busy")["latest_build"]["deadline"])
    assert deadline <= datetime.now(UTC) + timedelta(hours=3, minutes=1)
    deployment.cli("alice", "templates", "edit", "local", "--activity-bump", "30m")


def ssh_command(deployment: Deployment) -> list[str]:
    executable = shutil.which("slipway") or str(Path(sys.executable).parent / "slipway")
    return [executable, "ssh"]


def test_update_restart_and_autoupdate_with_real_builds(deployment: Deployment, executor_app: Flask) -> None:
    deployment.create("carol", "upd")
    first = wait_status(deployment, "upd", "running")
    assert "already on the template's active version" in cli_ok(deployment, "update", "upd")
    deployment.push_local()  # a new version, made active
    outdated = deployment.workspace("carol", "upd")
    assert outdated["outdated"] is True
    assert "yes" in cli_ok(deployment, "list").split("upd", 1)[1].splitlines()[0]
    cli_ok(deployment, "update", "upd")
    updated = wait_status(deployment, "upd", "running")
    assert updated["outdated"] is False
    assert updated["latest_build"]["template_version_id"] != first["latest_build"]["template_version_id"]

    restarted = cli_ok(deployment, "restart", "upd")
    assert "Stopping upd" in restarted and "Starting upd" in restarted
    assert wait_status(deployment, "upd", "running")["latest_build"]["transition"] == "start"

    # Automatic updates: the next scheduled start builds the newest version, with reason autoupdate.
    with deployment.api("carol") as api:
        workspace_id = updated["id"]
        assert (
            api.put(f"/workspaces/{workspace_id}/autoupdates", json={"automatic_updates": "always"}).status_code == 204
        )
        assert (
            api.put(f"/workspaces/{workspace_id}/autostart", json={"schedule": "CRON_TZ=UTC 0 6 * * *"}).status_code
            == 204
        )
    cli_ok(deployment, "stop", "upd")
    deployment.push_local()
    next_start = at(deployment.workspace("carol", "upd")["next_start_at"])
    report = tick(executor_app, next_start + timedelta(minutes=1))
    assert (updated["id"], "autoupdate") in report.queued
    autoupdated = wait_status(deployment, "upd", "running")
    assert autoupdated["latest_build"]["reason"] == "autoupdate" and autoupdated["outdated"] is False


def test_an_unused_workspace_goes_dormant_refuses_to_start_and_is_deleted(
    deployment: Deployment, executor_app: Flask
) -> None:
    deployment.create("carol", "idle")
    running = wait_status(deployment, "idle", "running")
    edited = deployment.cli(
        "alice", "templates", "edit", "local", "--dormancy-threshold", "1d", "--dormancy-auto-deletion", "2d"
    )
    assert edited.returncode == 0, edited.stderr
    # Read again after the edit: the agent's activity may have moved the last use on since the build.
    used = at(deployment.workspace("carol", "idle")["last_used_at"])
    report = tick(executor_app, used + timedelta(days=1, minutes=1))
    assert (running["id"], "dormancy") in report.queued, report
    dormant = wait_status(deployment, "idle", "stopped")
    assert dormant["dormant_at"] and dormant["deleting_at"], dormant
    listed = cli_ok(deployment, "list")
    assert "dormant" in next(line for line in listed.splitlines() if line.startswith("idle ")), listed
    refused = deployment.cli("carol", "start", "idle")
    assert refused.returncode == 1 and "dormant" in refused.stderr, refused.stdout + refused.stderr
    report = tick(executor_app, at(dormant["deleting_at"]) + timedelta(minutes=1))
    assert (running["id"], "autodelete") in report.queued, report
    wait_until(lambda: "idle" not in cli_ok(deployment, "list"), BUILD_TIMEOUT, "idle deleted")
    # The others on the template are not dormant: their last use is recent against the real clock.
    with deployment.api("alice") as api:
        api.patch(f"/templates/{running['template_id']}", json={"time_til_dormant_ms": 0})


def test_in_a_browser_the_schedule_card_and_an_update_asking_for_a_new_parameter(
    deployment: Deployment, tmp_path: Path
) -> None:
    """Last in the module: it makes a version with a new required parameter active."""
    assert deployment.cli("alice", "templates", "edit", "local", "--default-ttl", "2h").returncode == 0
    deployment.create("carol", "web")
    running = wait_status(deployment, "web", "running")
    url = f"{deployment.url}/workspaces/{running['id']}"
    with browser_page() as first:
        # A browser in New York: the schedule's zone is taken from it (static/schedule.js), nothing typed.
        chromium = first.context.browser
        assert chromium is not None
        page = chromium.new_context(viewport=first.viewport_size, timezone_id="America/New_York").new_page()
        problems = watch_for_problems(page.context)
        sign_in_page(page, deployment.url, "carol@example.com")
        expect(page).to_have_url(f"{deployment.url}/workspaces")
        page.goto(url)
        card = page.locator("#schedule-card")
        expect(card).to_contain_text("Starts")
        card.locator("summary", has_text="Edit schedule").click()
        expect(page.locator("#zone")).to_have_value("America/New_York")
        # The day picker: the Weekdays shortcut, then Tuesday and Thursday off; a time from the time field.
        page.get_by_role("button", name="Weekdays").click()
        page.uncheck("#day-tue")
        page.uncheck("#day-thu")
        page.fill("#start-time", "07:15")
        page.fill("#ttl-hours", "6")
        card.screenshot(path=str(ARTIFACTS / "schedule-picker.png"))
        page.click("#schedule-form button[type=submit]")
        expect(page.locator(".flash-success")).to_contain_text("Schedule saved")
        expect(page.locator("#schedule-sentence")).to_have_text("Mon, Wed and Fri at 07:15, New York time")
        expect(card).to_contain_text("next")
        card.scroll_into_view_if_needed()
        card.screenshot(path=str(ARTIFACTS / "schedule-sentence.png"))
        before = page.locator("#stops-at").inner_text()
        page.click("#schedule-card button[value='1']")
        expect(page.locator("#stops-at")).not_to_have_text(before)

        # A new version adds a required parameter: the page says the workspace is outdated, Update asks for it.
        template = tmp_path / "local-v2"
        shutil.copytree(EXAMPLE, template)
        with (template / "main.tf").open("a") as main:
            main.write(
                '\ndata "coder_parameter" "team" {\n  name    = "team"\n  type    = "string"\n  mutable = true\n}\n'
            )
        pushed = deployment.cli(
            "alice", "templates", "push", "local", "-d", str(template), "--variable",
            f"workspaces_root={deployment.workspaces_root}",
        )  # fmt: skip
        assert pushed.returncode == 0, pushed.stdout + pushed.stderr
        page.goto(url)
        banner = page.locator("#outdated-banner")
        expect(banner).to_contain_text("active version")
        banner.locator("button").click()
        expect(page.locator("input[name='param:team']")).to_be_visible()
        page.fill("input[name='param:team']", "platform")
        page.click("#update-submit")
        expect(page).to_have_url(re.compile(r"/builds/"))
        page.screenshot(path=str(ARTIFACTS / "lifecycle-update.png"), full_page=True)
        assert problems == [], "\n".join(problems)
    updated = wait_status(deployment, "web", "running")
    assert updated["outdated"] is False
    with deployment.api("carol") as api:
        values = api.get(f"/workspacebuilds/{updated['latest_build']['id']}/parameters").json()
    assert {"name": "team", "value": "platform"} in values
