"""The Provisioner jobs page: every job newest first, a page at a time, narrowed by status; for owners and template
admins (members get 403, as on the Provisioners page)."""

from __future__ import annotations

import re

import pytest
from flask import Flask
from flask.testing import FlaskClient

from tests.conftest import PASSWORD, Persona
from tests.support import bulk
from tests.support.daemon import FakeDaemon, import_template, push_version
from tests.support.web import first_event, sign_in, stream_url

pytestmark = pytest.mark.databases("sqlite", "postgresql")


@pytest.mark.parametrize("who", ["alice", "bob"])
def test_every_job_is_listed_newest_first_and_narrowed_by_status(
    client: FlaskClient, personas: dict[str, Persona], who: str
) -> None:
    older, newer = push_version(client, personas["bob"]), push_version(client, personas["bob"])
    FakeDaemon(client).call(f"/jobs/{older['job']['id']}/acquire")  # running now; the newer one waits
    sign_in(client, f"{who}@example.com", PASSWORD)

    page = client.get("/provisioners/jobs").get_data(as_text=True)
    listed = re.findall(r'data-job="([^"]+)"', page)
    assert listed == [newer["job"]["id"], older["job"]["id"]] and "2 jobs" in page

    pending = client.get("/provisioners/jobs?status=pending").get_data(as_text=True)
    assert re.findall(r'data-job="([^"]+)"', pending) == [newer["job"]["id"]]
    assert '<option value="pending" selected>' in pending

    none = client.get("/provisioners/jobs?status=succeeded").get_data(as_text=True)
    assert 'id="no-job-match"' in none and "No job has the status succeeded." in none

    bad = client.get("/provisioners/jobs?status=lost")
    assert bad.status_code == 400
    assert "Unknown job status &#39;lost&#39;: use pending," in bad.get_data(as_text=True)


def test_the_provisioners_page_links_to_every_job(client: FlaskClient, personas: dict[str, Persona]) -> None:
    sign_in(client, "bob@example.com", PASSWORD)
    assert 'href="/provisioners/jobs" id="all-jobs"' in client.get("/provisioners").get_data(as_text=True)


def test_members_cannot_list_jobs(client: FlaskClient, personas: dict[str, Persona]) -> None:
    sign_in(client, "carol@example.com", PASSWORD)
    assert client.get("/provisioners/jobs").status_code == 403


def test_the_page_refreshes_itself_when_one_of_its_jobs_changes(
    client: FlaskClient, personas: dict[str, Persona]
) -> None:
    """The stream watches the page shown (its status filter and page number): a job starting refreshes it."""
    job = push_version(client, personas["bob"])["job"]
    sign_in(client, "bob@example.com", PASSWORD)
    page = client.get("/provisioners/jobs?status=pending").get_data(as_text=True)
    jobs_stream = stream_url(page)
    assert "status=pending" in jobs_stream and "page=1" in jobs_stream
    assert 'hx-get="/provisioners/jobs?status=pending&amp;page=1"' in page  # the refresh re-reads the same page

    FakeDaemon(client).call(f"/jobs/{job['id']}/acquire")  # it leaves the pending list after the page rendered
    received = first_event(client, jobs_stream)
    assert received.startswith(b": connected") and b"event: refresh\ndata: changed" in received


def test_a_stream_for_a_status_that_does_not_exist_is_refused(
    client: FlaskClient, personas: dict[str, Persona]
) -> None:
    sign_in(client, "bob@example.com", PASSWORD)
    refused = client.get("/provisioners/jobs/events?status=lost")
    assert refused.status_code == 400 and "Unknown job status" in refused.get_data(as_text=True)


def test_jobs_are_counted_ten_pages_ahead(app: Flask, client: FlaskClient, personas: dict[str, Persona]) -> None:
    """Every build and import is a job: an exact count would grow with all of them, on every page and refresh."""
    template = import_template(client, personas, FakeDaemon(client))
    bulk.add_versions(app, template["active_version_id"], 280)  # 281 jobs: more than eleven pages of 25
    sign_in(client, "bob@example.com", PASSWORD)
    page = client.get("/provisioners/jobs").get_data(as_text=True)
    assert "More than 275 jobs" in page and "1–25 of more than 275" in page and "Page 1 of 11+" in page
    last = client.get("/provisioners/jobs?page=12").get_data(as_text=True)  # counted from there, exactly
    assert "281 jobs" in last and "276–281 of 281" in last
