"""A private Git server over smart HTTP for tests: ``git http-backend`` (CGI) behind a small HTTP server that lets
a request in only with a valid, unexpired access token as its Basic password — checked at the OpenID
provider's userinfo endpoint on every request, as a Git provider checks its own tokens."""

from __future__ import annotations

import base64
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType

import httpx

from tests.support.net import free_port


def _basic_password(authorization: str) -> str | None:
    kind, _, credentials = authorization.partition(" ")
    if kind.lower() != "basic":
        return None
    try:
        _, _, password = base64.b64decode(credentials).decode().partition(":")
    except ValueError:
        return None
    return password or None


class GitServer:
    def __init__(self, root: Path, userinfo_url: str) -> None:
        self.root = root
        self.userinfo_url = userinfo_url
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        # Every token that got in, in order.
        self.accepted_tokens: list[str] = []
        self.refused = 0
        self._httpd: ThreadingHTTPServer | None = None

    def create_repository(self, name: str) -> Path:
        """A bare repository with one commit, open to pushes over HTTP."""
        bare = self.root / name
        seed = self.root / f"{name}-seed"
        subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(bare)], check=True)
        subprocess.run(["git", "-C", str(bare), "config", "http.receivepack", "true"], check=True)
        subprocess.run(["git", "init", "-q", "-b", "main", str(seed)], check=True)
        (seed / "README.md").write_text("a private repository\n")
        git = ["git", "-C", str(seed), "-c", "user.name=seed", "-c", "user.email=seed@example.com"]
        subprocess.run([*git, "add", "README.md"], check=True)
        subprocess.run([*git, "commit", "-qm", "first"], check=True)
        subprocess.run([*git, "push", "-q", str(bare), "main"], check=True)
        return bare

    def log(self, name: str) -> list[str]:
        """The repository's commit subjects, newest first."""
        result = subprocess.run(
            ["git", "-C", str(self.root / name), "log", "--format=%s", "main"], capture_output=True, text=True
        )
        return result.stdout.splitlines()

    def token_valid(self, token: str) -> bool:
        reply = httpx.get(self.userinfo_url, headers={"Authorization": f"Bearer {token}"}, timeout=10)
        return reply.status_code == 200

    def start(self) -> GitServer:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                server.serve(self)

            def do_POST(self) -> None:
                server.serve(self)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.root.mkdir(parents=True, exist_ok=True)
        self._httpd = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()
        return self

    def serve(self, request: BaseHTTPRequestHandler) -> None:
        token = _basic_password(request.headers.get("Authorization", ""))
        if token is None or not self.token_valid(token):
            self.refused += 1
            request.send_response(401)
            request.send_header("WWW-Authenticate", 'Basic realm="private git"')
            request.send_header("Content-Length", "0")
            request.end_headers()
            return
        self.accepted_tokens.append(token)
        length = int(request.headers.get("Content-Length") or 0)
        body = request.rfile.read(length) if length else b""
        path, _, query = request.path.partition("?")
        env = {
            "PATH": "/usr/bin:/bin",
            "GIT_PROJECT_ROOT": str(self.root),
            "GIT_HTTP_EXPORT_ALL": "1",
            "REQUEST_METHOD": request.command,
            "PATH_INFO": path,
            "QUERY_STRING": query,
            "CONTENT_TYPE": request.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(len(body)),
            "HTTP_CONTENT_ENCODING": request.headers.get("Content-Encoding", ""),
            "REMOTE_USER": "tester",
            "REMOTE_ADDR": "127.0.0.1",
        }
        result = subprocess.run(["git", "http-backend"], input=body, env=env, capture_output=True)
        head, _, payload = result.stdout.partition(b"\r\n\r\n")
        status, headers = 200, []
        for line in head.decode().split("\r\n"):
            name, _, value = line.partition(":")
            if name.lower() == "status":
                status = int(value.split()[0])
            elif name:
                headers.append((name, value.strip()))
        request.send_response(status)
        for name, value in headers:
            request.send_header(name, value)
        request.send_header("Content-Length", str(len(payload)))
        request.end_headers()
        request.wfile.write(payload)

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()

    def __enter__(self) -> GitServer:
        return self.start()

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.stop()
