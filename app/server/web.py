"""gunicorn's settings for `slipway server`'s web server (``gunicorn -c python:app.server.web``).

The application is loaded once, in gunicorn's master, and forked into the workers (``preload_app``), while the
supervisor starts Redis and migrates the database: the imports (about a second) then overlap the migrations
instead of following them, workers that gunicorn restarts are up at once, and the workers share the loaded code's
memory. The master waits at its start gate (app/server/start_gate.py) before it listens and forks, so no
connection is accepted before the database is ready: refused, a client or a load balancer tries another replica at
once.

gevent patches the standard library here, before the application is imported in the master, as the workers did
before they loaded it: what the application creates at load (locks, pools) is then gevent's in every worker.
"""

from __future__ import annotations

import gc

# No cycle collection while the application loads: its imports make ~150,000 objects that live as long as the server,
# and the collector would walk them again and again (a sixth of the load time). Frozen before the fork, below.
gc.disable()

from gevent import monkey  # noqa: E402

monkey.patch_all()

import os  # noqa: E402
import sys  # noqa: E402
from typing import Any  # noqa: E402

from app.server.start_gate import START_GATE_FD_ENV, wait_for_gate  # noqa: E402

preload_app = True


def on_starting(server: Any) -> None:
    # What is loaded by now (modules, the app, SQLAlchemy's mappers) lives as long as the server: frozen here, out
    # of the cycle collector's sight, before the workers fork (app/server/worker.py says why it matters), so that
    # no worker walks it on its way up. Not collected first: the little garbage the imports left is not worth a
    # full collection on the way to serving.
    gc.freeze()
    gc.enable()
    gate = os.environ.pop(START_GATE_FD_ENV, None)
    if gate is not None and not wait_for_gate(int(gate)):
        sys.exit(1)  # the supervisor stopped while starting (it says why)


def post_fork(server: Any, worker: Any) -> None:
    """Each worker opens its own database connections: none made in the master may be shared across the fork."""
    from app.core.extensions import db

    app = worker.app.wsgi()
    with app.app_context():
        for engine in db.engines.values():
            engine.dispose(close=False)
