"""Issue 2 benchmark: API and dashboard latency under 20 concurrent clients, cold start, idle memory.

Targets on 2 cores: p99 <= 50 ms at >= 300 requests/s; cold start (launch -> first 200 on /healthz) <= 3 s.
Run: .venv/bin/python bench/api_latency.py [--seconds 10] [--clients 20] [--starts 3]
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import Server, median, run_load

PASSWORD = "correct-horse-battery"


def browser_cookie(url: str) -> str:
    """Sign in through the real login form (CSRF token included) and return the session cookie header."""
    with httpx.Client(base_url=url) as browser:
        token = re.search(r'name="csrf_token" value="([^"]+)"', browser.get("/login").text)
        assert token, "no CSRF token on the login page"
        response = browser.post(
            "/login", data={"email": "alice@example.com", "password": PASSWORD, "csrf_token": token[1]}
        )
        assert response.status_code == 302, response.text
        return "; ".join(f"{name}={value}" for name, value in browser.cookies.items())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--starts", type=int, default=3, help="cold starts to time (median is reported)")
    parser.add_argument("--rate", type=float, default=400.0, help="offered requests/s for the paced runs")
    args = parser.parse_args()

    cold_starts = []
    for _ in range(args.starts):
        server = Server().start()
        cold_starts.append(server.cold_start_seconds)
        server.stop()

    server = Server().start()
    try:
        httpx.post(
            f"{server.url}/api/v2/users/first",
            json={"username": "alice", "email": "alice@example.com", "password": PASSWORD},
        )
        login = httpx.post(
            f"{server.url}/api/v2/users/login", json={"email": "alice@example.com", "password": PASSWORD}
        )
        bearer = {"Authorization": f"Bearer {login.json()['session_token']}"}
        cookie = {"Cookie": browser_cookie(server.url)}
        run_load(server.port, "/api/v2/users/me", bearer, clients=args.clients, seconds=1.0)  # warm up every worker
        time.sleep(1.0)
        idle_rss = server.rss_mb()
        results = {
            (path, mode): run_load(
                server.port, path, headers, clients=args.clients, seconds=args.seconds, rate=0.0 if mode else args.rate
            )
            for path, headers in (("/api/v2/users/me", bearer), ("/workspaces", cookie))
            for mode in (False, True)
        }
    finally:
        server.stop()

    print(
        f"api_latency: {args.clients} keep-alive clients, {args.seconds:.0f} s per endpoint and mode, 2 gevent workers"
    )
    for (path, saturated), result in results.items():
        print(result.line(f"GET {path} {'saturated' if saturated else f'at {args.rate:.0f}/s'}"))
    print(
        f"cold start (launch -> 200 /healthz): median {median(cold_starts):.2f} s of {args.starts} "
        f"({', '.join(f'{s:.2f}' for s in cold_starts)})"
    )
    print(f"idle RSS (server + redis + web workers): {idle_rss:.0f} MB")
    print("targets: p99 <= 50 ms at >= 300 req/s; cold start <= 3 s")


if __name__ == "__main__":
    main()
