"""Domain errors raised by services, and their mapping to HTTP responses (the only place that does it).

Services raise these with a message fit for a person; views never build error responses by hand. API routes
answer the JSON error shape of API.md; pages render ``errors/error.html`` with the same message.
"""

from __future__ import annotations

import logging

import redis
import sqlalchemy.exc
from flask import Flask, Response, current_app, g, jsonify, render_template, request
from flask_wtf.csrf import CSRFError
from werkzeug.exceptions import HTTPException

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
        log.exception("the database failed on %s %s", request.method, request.path)
        # The page is shown as to a signed-out visitor: finding who is signed in needs the database. (flask-login
        # reads the request's user from g._login_user before loading it.)
        g._login_user = current_app.login_manager.anonymous_user()  # type: ignore[attr-defined]
        return error_response(
            ServiceUnavailable("The database is not answering (it may be restarting); try again in a moment.")
        )

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
