"""The server's Ctrl-C and SIGTERM: its handlers take no lock, so a signal arriving at any moment stops it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.core.config import load_settings
from app.server.supervisor import Supervisor


@pytest.fixture
def supervisor(tmp_path: Path) -> Iterator[Supervisor]:
    previous = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    yield Supervisor(load_settings({"SLIPWAY_DATA_DIR": str(tmp_path)}), echo=lambda line: None)
    for signum, handler in previous.items():
        signal.signal(signum, handler)


def test_the_handler_returns_while_the_main_thread_holds_the_stop_events_lock(supervisor: Supervisor) -> None:
    # The watch loop once waited on this Event: a signal handled while its wait held the lock deadlocked the server.
    returned = threading.Event()

    def signal_arrives_inside_the_wait() -> None:
        with supervisor.stopping._cond:
            supervisor._on_signal(signal.SIGINT, None)
        returned.set()

    threading.Thread(target=signal_arrives_inside_the_wait, daemon=True).start()
    assert returned.wait(10), "the signal handler blocked on a lock"
    assert supervisor.signalled


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_ends_the_watch_and_stops_the_background_loops(supervisor: Supervisor, signum: int) -> None:
    supervisor.take_signals()
    threading.Timer(0.2, os.kill, (os.getpid(), signum)).start()
    assert supervisor._watch() == 0
    assert supervisor.stopping.is_set()  # what the maintenance and lifecycle threads wait on


def test_a_second_signal_kills_what_is_still_stopping(supervisor: Supervisor) -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    supervisor.children.append(child)
    try:
        supervisor._on_signal(signal.SIGINT, None)
        assert child.poll() is None  # the first asks politely (shutdown stops children with a grace period)
        supervisor._on_signal(signal.SIGINT, None)
        assert child.wait(30) == -signal.SIGKILL
    finally:
        child.kill()
        child.wait()
