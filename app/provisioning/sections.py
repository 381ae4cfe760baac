"""What other features add to a job's page — a build's, a template import's — above its log (the timings feature
adds its waterfall), wired by ``create_app`` so that the pages' packages need not know what the sections are."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from flask import Flask, current_app
from markupsafe import Markup

from app.provisioning.models import ProvisionerJob

EXTENSION_KEY = "slipway_job_sections"
# The job, and what the page calls it ("build #3", "the import of v2"): the viewer already may read the job.
JobSection = Callable[[ProvisionerJob, str], Markup]


def init_app(app: Flask, sections: Sequence[JobSection]) -> None:
    app.extensions[EXTENSION_KEY] = tuple(sections)


def job_sections(job: ProvisionerJob, title: str) -> list[Markup]:
    sections: tuple[JobSection, ...] = current_app.extensions.get(EXTENSION_KEY, ())
    return [render(job, title) for render in sections]
