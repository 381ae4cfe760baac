"""A network between a daemon and the server app (in process) that loses replies and refuses requests."""

from __future__ import annotations

import json
import threading

import httpx
from flask import Flask


class UnreliableNetwork(httpx.BaseTransport):
    """Passes requests to the app; ``lose_replies`` of them reach the server but their reply is lost, and
    ``refuse`` of them never arrive (the server is away). Counts the log lines that reach the server."""

    def __init__(self, app: Flask, lose_replies: int = 0, refuse: int = 0) -> None:
        self.app = httpx.WSGITransport(app=app)
        self.lose_replies, self.refuse = lose_replies, refuse
        self.lines_sent = 0
        self._lock = threading.Lock()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        with self._lock:
            refused = self.refuse > 0
            self.refuse -= int(refused)
        if refused:
            raise httpx.ConnectError("connection refused", request=request)
        body = json.loads(request.read() or b"{}")
        response = self.app.handle_request(request)
        with self._lock:
            self.lines_sent += len(body.get("logs", []))
            lost = self.lose_replies > 0 and bool(body.get("logs"))
            self.lose_replies -= int(lost)
        if lost:
            raise httpx.ReadError("connection reset by peer", request=request)
        return response
