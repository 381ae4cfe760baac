"""CPU-bound work off the event loop: a gevent web worker runs every request in one OS thread, so a few seconds of
pure Python (compiling a large regex) would stall every request of that worker, /healthz included."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def run_off_loop(work: Callable[[], T]) -> T:
    """``work()``, in gevent's pool of real threads when the process is monkey-patched (its other greenlets go on
    between the thread's GIL slices), else here: a sync worker, a test, the CLI have no event loop to keep."""
    if "gevent.monkey" in sys.modules:
        from gevent import get_hub, monkey

        if monkey.is_module_patched("threading"):
            result: T = get_hub().threadpool.apply(work)
            return result
    return work()
