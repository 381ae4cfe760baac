"""The application factory: :func:`create_app` is the table of contents of the server's subsystems."""

from __future__ import annotations

import logging
from pathlib import Path

from flask import Flask

from app import events, health, metrics
from app.accounts import api as accounts_api
from app.accounts import (
    groups_api,
    groups_views,
    idpsync_api,
    idpsync_views,
    organizations_api,
    organizations_views,
    people_views,
    permissions_api,
)
from app.accounts import views as accounts_views
from app.agents import agent_api, app_connections, app_views, bootstrap, connections, subdomain
from app.agents import api as agents_api
from app.agents import views as agent_views
from app.apidocs import views as apidocs_views
from app.appearance import api as appearance_api
from app.appearance import views as appearance_views
from app.audit import recorder as audit_recorder
from app.auditing import api as audit_api
from app.auditing import registry as audit_registry
from app.auditing import services as audit_services
from app.auditing import views as audit_views
from app.auth import access, oidc, oidc_views
from app.auth import views as auth_views
from app.catalog import acl_api as template_acl_api
from app.catalog import acl_views as template_acl_views
from app.catalog import api as catalog_api
from app.catalog import page_sections as template_sections
from app.catalog import storage
from app.catalog import views as catalog_views
from app.catalog.jobs import IMPORT_HANDLERS
from app.connectionlog import api as connectionlog_api
from app.connectionlog import services as connectionlog_services
from app.connectionlog import views as connectionlog_views
from app.core import encryption_keys, errors, limits, redis_client, security_headers, templating
from app.core.config import Settings, ensure_secret_key, load_settings
from app.core.extensions import csrf, db, engine_options, htmx
from app.core.read_transactions import end_reads_with_commit
from app.core.routing import LazyBuilderRule
from app.diagnostics import checks as diagnostics_checks
from app.diagnostics import views as diagnostics
from app.events import access as access_events
from app.externalauth import api as externalauth_api
from app.externalauth import flows as externalauth_flows
from app.externalauth import views as externalauth_views
from app.insights import api as insights_api
from app.insights import rollup as insights_rollup
from app.insights import views as insights_views
from app.lifecycle import activity
from app.lifecycle import api as lifecycle_api
from app.lifecycle import models as lifecycle_models  # noqa: F401 - the executor's table, for migrations
from app.lifecycle import views as lifecycle_views
from app.notifications import api as notifications_api
from app.notifications import delivery
from app.prebuilds import api as prebuilds_api
from app.prebuilds import views as prebuilds_views
from app.provisioning import api as provisioning_api
from app.provisioning import daemon_api, jobs, maintenance
from app.provisioning import sections as job_sections
from app.provisioning import views as provisioning_views
from app.timings import api as timings_api
from app.timings import views as timings_views
from app.usersecrets import api as usersecrets_api
from app.workspaces import api as workspaces_api
from app.workspaces import sections, sharing_api, sharing_views
from app.workspaces import services as workspace_services
from app.workspaces import template_views as template_workspace_views
from app.workspaces import views as workspace_views
from app.workspaces.jobs import build_handlers
from protocol.provisionerd import JOB_TEMPLATE_IMPORT, JOB_WORKSPACE_BUILD

ROOT = Path(__file__).resolve().parent.parent
MIGRATIONS_DIR = ROOT / "migrations"
JSON_BODY_LIMIT = 1024 * 1024


def create_app(settings: Settings | None = None, *, migrations: bool = True) -> Flask:
    """The application; `migrations=False` leaves Alembic out (Flask-Migrate's `upgrade` and friends then do not
    work on it): the web workers, which never migrate, import it for nothing otherwise (`slipway server` migrates
    in app/server/schema.py before they start)."""
    settings = ensure_secret_key(settings or load_settings())
    app = Flask(__name__, template_folder=str(ROOT / "templates"), static_folder=str(ROOT / "static"))
    app.url_rule_class = LazyBuilderRule  # before any route is added (app/core/routing.py says why)
    configure(app, settings)

    db.init_app(app)
    with app.app_context():
        end_reads_with_commit(db.engine)
    encryption_keys.init_app(app, settings)
    if migrations:
        from flask_migrate import Migrate

        Migrate(app, db, directory=str(MIGRATIONS_DIR))
    csrf.init_app(app)
    htmx.init_app(app)
    redis_client.init_app(app)
    limits.init_app(app)
    events.init_app(app)
    # Every flush of an audited model writes its entries in the same transaction (app/audit/recorder.py).
    audit_registry.register_models()
    audit_recorder.init_app()
    access.init_app(app)
    # Requests for an app's host (subdomain apps) go to the app before any of the dashboard's hooks.
    subdomain.init_app(app)
    # Idle keep-alive connections to apps, reused by the next request of the same person (per process).
    app_connections.init_app(app)
    errors.init_app(app)
    security_headers.init_app(app, settings)
    templating.init_app(app)
    oidc.init_app(app, settings)
    externalauth_flows.init_app(app)
    diagnostics.init_app(app)
    # What each kind of provisioner job is about; builds hand out the agent's init scripts.
    jobs.init_app(
        app,
        {JOB_TEMPLATE_IMPORT: IMPORT_HANDLERS, JOB_WORKSPACE_BUILD: build_handlers(bootstrap.agent_scripts)},
    )
    # Template archives stay while workspaces are on their versions; the maintenance loop frees the others.
    storage.init_app(app, workspace_services.versions_in_use)
    maintenance.init_app(
        app,
        [
            storage.free_unused_archives,
            activity.flush_activity,
            delivery.enqueue_due,
            diagnostics_checks.refresh_report,  # keeps the navigation's health dot current
            connections.sweep_connection_log,  # ends the log's rows whose holder died or went idle
            audit_services.prune_old_entries,  # --audit-retention
            connectionlog_services.prune_old_connections,  # the same retention, for the connection log
            insights_rollup.roll_up_insights,  # today's and yesterday's rollups (and older days not yet rolled up)
        ],
    )
    # What the workspace page shows besides the workspace itself: a panel per agent; and a job's page: its timings.
    sections.init_app(app, [agent_views.AGENTS_SECTION])
    job_sections.init_app(app, [timings_views.render_job_timings])
    # A template's page: the workspaces on it (a feature above the catalog's).
    template_sections.init_app(app, [template_workspace_views.workspaces_section, prebuilds_views.prebuilds_section])
    # Who holds open ways into workspaces, told when someone loses access (a share removed, a suspension).
    access_events.init_app(app, [connections.close_lost])
    appearance_views.init_app(app)
    for blueprint in (
        health.bp,
        auth_views.bp,
        oidc_views.bp,
        oidc_views.api,
        workspace_views.bp,
        template_workspace_views.bp,
        sharing_views.bp,
        catalog_views.bp,
        accounts_views.bp,
        people_views.bp,
        accounts_api.bp,
        idpsync_api.bp,
        idpsync_views.bp,
        catalog_api.bp,
        template_acl_api.bp,
        template_acl_views.bp,
        groups_views.bp,
        groups_api.bp,
        organizations_api.bp,
        organizations_views.bp,
        permissions_api.bp,
        workspaces_api.bp,
        sharing_api.bp,
        lifecycle_api.bp,
        lifecycle_views.bp,
        notifications_api.bp,
        externalauth_api.bp,
        usersecrets_api.bp,
        externalauth_views.bp,
        diagnostics.api,
        diagnostics.bp,
        daemon_api.bp,
        agent_api.bp,
        agents_api.bp,
        bootstrap.bp,
        app_views.bp,
        subdomain.bp,
        subdomain.api,
        agent_views.bp,
        provisioning_api.bp,
        provisioning_views.bp,
        timings_api.bp,
        audit_api.bp,
        audit_views.bp,
        timings_views.bp,
        connectionlog_api.bp,
        connectionlog_views.bp,
        insights_api.bp,
        insights_views.bp,
        appearance_api.bp,
        prebuilds_api.bp,
        prebuilds_views.bp,
        appearance_views.bp,
        metrics.bp,
        apidocs_views.api,
        apidocs_views.bp,
    ):
        app.register_blueprint(blueprint)
    return app


def configure(app: Flask, settings: Settings) -> None:
    secure_cookies = settings.access_url.startswith("https://")
    app.config.update(
        SLIPWAY_SETTINGS=settings,
        SECRET_KEY=settings.secret_key,
        SQLALCHEMY_DATABASE_URI=settings.database_url,
        SQLALCHEMY_ENGINE_OPTIONS=engine_options(settings.database_url),
        MAX_CONTENT_LENGTH=JSON_BODY_LIMIT,
        SESSION_COOKIE_NAME=session_cookie_name(secure_cookies),
        SESSION_COOKIE_HTTPONLY=True,
        SESSION_COOKIE_SAMESITE="Lax",
        SESSION_COOKIE_SECURE=secure_cookies,
        PERMANENT_SESSION_LIFETIME=settings.session_duration,
        WTF_CSRF_TIME_LIMIT=None,  # the token lives as long as the session; expiry is the session's job
    )
    logging.getLogger("slipway").setLevel(logging.INFO)


def session_cookie_name(secure: bool) -> str:
    """Over HTTPS the ``__Host-`` prefix: browsers then take a cookie of that name only from the dashboard's own
    host, without a Domain, so no app host under the wildcard (a subdomain of the dashboard, often) can plant one
    that the dashboard would read. Plain HTTP cannot have it (it requires Secure)."""
    return "__Host-slipway_session" if secure else "slipway_session"
