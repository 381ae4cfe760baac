"""Real receivers for notification tests: an SMTP mailbox (aiosmtpd handler and authenticator) and a webhook
endpoint that checks the signature."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from aiosmtpd.smtp import AuthResult, LoginPassword

from app.notifications.delivery import sign

SECRET = "webhook-secret"


class Mailbox:
    def __init__(self) -> None:
        self.messages: list[str] = []

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self.messages.append(envelope.content.decode())
        return "250 OK"


def authenticate(server: Any, session: Any, envelope: Any, mechanism: str, data: Any) -> AuthResult:
    ok = isinstance(data, LoginPassword) and data.login == b"mailer" and data.password == b"mail-password"
    return AuthResult(success=ok)


class Receiver:
    """A webhook endpoint that keeps what it got with a valid signature and refuses the rest."""

    def __init__(self, port: int) -> None:
        self.port, self.received, self.refused = port, [], 0
        self.server: ThreadingHTTPServer | None = None

    def start(self) -> None:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if self.headers.get("X-Slipway-Signature") != sign(body, SECRET):
                    receiver.refused += 1
                    self.send_response(401)
                else:
                    receiver.received.append(json.loads(body))
                    self.send_response(204)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
