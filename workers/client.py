"""The daemon's HTTP client for ``/api/v2/provisionerd/``: the only way a daemon reaches the server."""

from __future__ import annotations

import logging
import time

import httpx

from protocol.codec import JSON, Message, ProtocolError, loads
from protocol.provisionerd import (
    API_PREFIX,
    DAEMON_HEADER,
    KEY_HEADER,
    PSK_HEADER,
    AcquiredJob,
    CommitQuota,
    JobCompletion,
    JobFailure,
    JobOffer,
    LogBatch,
    LogBatchReply,
    QuotaCommitted,
    Registered,
    Registration,
    WaitForJob,
)

log = logging.getLogger(__name__)


def psk_credential(psk: str) -> dict[str, str]:
    return {PSK_HEADER: psk}


def key_credential(key: str) -> dict[str, str]:
    return {KEY_HEADER: key}


def token_credential(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


class ServerRefused(Exception):
    """The server answered with an error that retrying will not fix (e.g. 401, 403, 409)."""

    def __init__(self, status: int, message: str):
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message

    @property
    def fatal(self) -> bool:
        """The credential is bad or gone: the daemon must stop, not retry. (A 403 about one job is not fatal.)"""
        return self.status == 401


class ProvisionerClient:
    def __init__(
        self,
        url: str,
        *,
        credential: dict[str, str],
        timeout: float = 30.0,
        retry_for: float = 60.0,
        transport: httpx.BaseTransport | None = None,
    ):
        self.url = url.rstrip("/")
        self.daemon_id = ""
        self.retry_for = retry_for
        self._http = httpx.Client(
            base_url=f"{self.url}{API_PREFIX}", headers=credential, timeout=timeout, transport=transport
        )

    def close(self) -> None:
        self._http.close()

    def call(
        self, path: str, body: Message | None = None, *, timeout: float | None = None, retry_for: float | None = None
    ) -> JSON:
        """POST with retries while the server is unreachable or restarting (5xx), for ``retry_for`` seconds (the
        client's own by default); other errors raise."""
        retry_for = self.retry_for if retry_for is None else min(retry_for, self.retry_for)
        deadline = time.monotonic() + retry_for
        delay = 0.05
        reported = ""
        headers = {DAEMON_HEADER: self.daemon_id} if self.daemon_id else {}
        content = body.dumps() if body is not None else "{}"
        headers["Content-Type"] = "application/json"
        while True:
            try:
                response = self._http.post(
                    path, content=content, headers=headers, timeout=timeout or httpx.USE_CLIENT_DEFAULT
                )
                if response.status_code < 500:
                    break
                problem = f"server error {response.status_code}"
            except httpx.TransportError as exc:
                problem = str(exc) or exc.__class__.__name__
            if time.monotonic() + delay > deadline:
                raise ConnectionError(f"cannot reach {self.url}: {problem}")
            if problem != reported:  # once per kind of trouble, not once per retry
                log.warning("provisionerd call %s failed (%s); retrying up to %.0f s", path, problem, retry_for)
                reported = problem
            time.sleep(delay)
            delay = min(delay * 2, 5.0)
        if response.status_code >= 400:
            raise ServerRefused(response.status_code, _message_of(response))
        if not response.content:
            return None
        try:
            return loads(response.content)
        except ProtocolError as exc:
            raise ServerRefused(response.status_code, f"the server's reply is not JSON: {exc}") from None

    def register(self, registration: Registration) -> Registered:
        reply = Registered.from_json(self.call("/register", registration))
        self.daemon_id = reply.daemon_id
        return reply

    def heartbeat(self) -> None:
        self.call("/heartbeat")

    def acquire(self, job_id: str) -> AcquiredJob:
        return AcquiredJob.from_json(self.call(f"/jobs/{job_id}/acquire"))

    def wait_for_job(self, timeout_seconds: int) -> JobOffer | None:
        """A pending job to acquire, or None when none came within ``timeout_seconds`` (ask again)."""
        reply = self.call("/jobs/wait", WaitForJob(timeout_seconds=timeout_seconds), timeout=timeout_seconds + 30)
        return None if reply is None else JobOffer.from_json(reply)

    def post_logs(self, job_id: str, batch: LogBatch, *, retry_for: float | None = None) -> LogBatchReply:
        """Send a batch (also the heartbeat); the reply says whether the job was canceled or its log is full."""
        return LogBatchReply.from_json(self.call(f"/jobs/{job_id}/logs", batch, retry_for=retry_for))

    def commit_quota(self, job_id: str, daily_cost: int) -> QuotaCommitted:
        """Coder's CommitQuota: may a build whose plan costs ``daily_cost`` a day be applied?"""
        return QuotaCommitted.from_json(self.call(f"/jobs/{job_id}/quota", CommitQuota(daily_cost=daily_cost)))

    def complete(self, job_id: str, completion: JobCompletion) -> None:
        self.call(f"/jobs/{job_id}/complete", completion)

    def fail(self, job_id: str, failure: JobFailure) -> None:
        self.call(f"/jobs/{job_id}/fail", failure)


def _message_of(response: httpx.Response) -> str:
    try:
        body = loads(response.content)
    except ProtocolError:
        return response.text
    message = body.get("message") if isinstance(body, dict) else None
    return message if isinstance(message, str) else response.text
