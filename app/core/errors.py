"""Domain errors raised by services, and their mapping to HTTP responses (the only place that does it).

Services raise these with a message fit for a person; views never build error responses by hand. API routes
answer the JSON error shape of API.md; pages render ``errors/error.html`` with the same message.
"""

from __future__ import annotations

import errno
import logging

import redis
import sqlalchemy.exc
from flask import Flask, Response, current_app, g, jsonify, render_template, request
from flask_wtf.csrf import CSRFError
from werkzeug.exceptions import HTTPException

from app.core.extensions import db
from protocol.codec import JsonObject

log = logging.getLogger(__name__)


class DomainError(Exception):
    status = 400

    def __init__(self, message: str, *, detail: str = "", validations: list[dict[str, str]] | None = None):
        super().__init__(message)
        self.message = message
        self.detail = detail
        self.validations = validations or []

    def to_json(self) -> JsonObject:
        """API.md's error body (protocol.publicapi.ErrorBody is how clients read it)."""
        body: JsonObject = {"message": self.message}
        if self.detail:
            body["detail"] = self.detail
        if self.validations:
            body["validations"] = self.validations
        return body


class InvalidInput(DomainError):
    status = 400


class Unauthorized(DomainError):
    status = 401


class Forbidden(DomainError):
    status = 403


class NotFound(DomainError):
    status = 404


class Conflict(DomainError):
    status = 409


class TooLarge(DomainError):
    status = 413


class RateLimited(DomainError):
    status = 429


class ServiceUnavailable(DomainError):
    """Something the server needs (its database, Redis) is not answering: try again shortly."""

    status = 503


class InsufficientStorage(DomainError):
    """The disk under the server's data or database is full: a write was refused, and it will be until space is
    freed (not a restart to wait out, which is what a 503 tells a client)."""

    status = 507


DISK_FULL = (
    "The server's disk is full, so nothing can be saved; an administrator must free space (the Health page says "
    "how much is left)."
)
# SQLite's SQLITE_FULL ("database or disk is full") and PostgreSQL's disk_full (SQLSTATE 53100, "could not extend
# file ... No space left on device"): the two ways the database refuses a write for lack of space.
_SQLITE_FULL = 13
_POSTGRES_DISK_FULL = "53100"


def is_disk_full(error: BaseException) -> bool:
    """Whether a database error or an OS error means the disk is out of space (or the writer's quota)."""
    if isinstance(error, sqlalchemy.exc.DBAPIError):
        error = error.orig if isinstance(error.orig, BaseException) else error
    if isinstance(error, OSError):
        return error.errno in (errno.ENOSPC, errno.EDQUOT)
    if getattr(error, "sqlite_errorcode", None) == _SQLITE_FULL:
        return True
    return getattr(error, "sqlstate", None) == _POSTGRES_DISK_FULL


class BadGateway(DomainError):
    """Something behind the server (a workspace's app, its agent) did not answer."""

    status = 502


def wants_json() -> bool:
    # Programs call /api/ and scrape /metrics; everything else is a page a person reads.
    return request.path.startswith("/api/") or request.path == "/metrics"


def error_response(error: DomainError) -> tuple[Response | str, int]:
    if wants_json():
        return jsonify(error.to_json()), error.status
    return render_template("errors/error.html", error=error), error.status


def init_app(app: Flask) -> None:
    @app.errorhandler(DomainError)
    def handle_domain_error(error: DomainError) -> tuple[Response | str, int]:
        return error_response(error)

    @app.errorhandler(CSRFError)
    def handle_csrf_error(error: CSRFError) -> tuple[Response | str, int]:
        return error_response(
            InvalidInput("The form has expired or was not sent by this site. Reload the page and try again.")
        )

    @app.errorhandler(HTTPException)
    def handle_http_error(error: HTTPException) -> tuple[Response | str, int]:
        status = error.code or 500
        mapped = DomainError(error.description or error.name)
        mapped.status = status
        if status == 413:
            mapped.message = "The request body is too large."
        return error_response(mapped)

    @app.errorhandler(sqlalchemy.exc.OperationalError)
    @app.errorhandler(sqlalchemy.exc.TimeoutError)
    def handle_database_unavailable(error: Exception) -> tuple[Response | str, int]:
        # The database went away, restarts, is locked or full: nothing the caller did, and it passes. The operator
        # gets the traceback; the caller a 503 to retry on.
        if is_disk_full(error):
            return disk_full_response(error)
        log.exception("the database failed on %s %s", request.method, request.path)
        # The page is shown as to a signed-out visitor: finding who is signed in needs the database. (flask-login
        # reads the request's user from g._login_user before loading it.)
        g._login_user = current_app.login_manager.anonymous_user()  # type: ignore[attr-defined]
        return error_response(
            ServiceUnavailable("The database is not answering (it may be restarting); try again in a moment.")
        )

    @app.errorhandler(OSError)
    def handle_os_error(error: OSError) -> tuple[Response | str, int]:
        # A file the server writes (an upload, a cached archive) on a full disk; any other OS error is unexpected.
        if is_disk_full(error):
            return disk_full_response(error)
        return handle_unexpected(error)

    @app.errorhandler(redis.exceptions.ConnectionError)
    @app.errorhandler(redis.exceptions.TimeoutError)
    def handle_redis_unavailable(error: Exception) -> tuple[Response | str, int]:
        log.warning("Redis failed on %s %s: %s", request.method, request.path, error)
        return error_response(ServiceUnavailable("Redis is not answering (it may be restarting); try again shortly."))

    @app.errorhandler(Exception)
    def handle_unexpected(error: Exception) -> tuple[Response | str, int]:
        # Log the traceback for the operator; the user gets a plain sentence, never a stack trace.
        log.exception("unhandled error on %s %s", request.method, request.path)
        mapped = DomainError("Something went wrong on the server. The error has been logged.")
        mapped.status = 500
        return error_response(mapped)


def disk_full_response(error: Exception) -> tuple[Response | str, int]:
    # Said as it is, on every path (API, pages, daemons' posts), rather than as a database to wait for: retrying
    # will not help until an operator frees space, and /healthz already says "disk full".
    log.error("a write was refused for lack of space on %s %s: %s", request.method, request.path, error)
    # The failed commit leaves the session unusable ("prepared"): what the reply still reads (the appearance's
    # banner, on the page) needs it back. Reads need no room.
    db.session.rollback()
    # As for a database outage: finding who is signed in may need the database, so the page is a visitor's.
    g._login_user = current_app.login_manager.anonymous_user()  # type: ignore[attr-defined]
    return error_response(InsufficientStorage(DISK_FULL))
