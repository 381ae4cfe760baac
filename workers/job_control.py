"""What a running job's parts share: the daemon's settings for it, and the control that cancels or kills it."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from workers.provider_zygote import ProviderZygote
from workers.terraform.init_cache import DEFAULT_MAX_BYTES


@dataclass(frozen=True)
class RunnerSettings:
    cache_dir: Path
    terraform_path: str | None = None
    # From the server: how long a canceled Terraform may take to stop before it is killed.
    force_cancel_seconds: float = 600.0
    # The cap of the prepared-init cache (workers/terraform/init_cache.py); 0 turns it off.
    init_cache_bytes: int = DEFAULT_MAX_BYTES
    # Terraform's plugin cache, this daemon's own: init may rewrite a provider there while, were the cache shared,
    # another daemon's plan or apply ran from it ("Failed to load plugin schemas ... no such file or directory").
    # None: cache_dir/plugins (a daemon alone on its cache dir).
    plugin_cache_dir: Path | None = None

    # Where outcomes wait until the server acknowledges them (workers/outbox.py), this daemon's own.
    outbox_dir: Path | None = None

    # The daemon's warm coder provider (workers/provider_zygote.py); None: Terraform starts it each time.
    provider_zygote: ProviderZygote | None = None

    @property
    def plugin_cache(self) -> Path:
        return self.plugin_cache_dir or self.cache_dir / "plugins"

    @property
    def outbox(self) -> Path:
        return self.outbox_dir or self.cache_dir / "outbox"


class JobControl:
    """Shared between the log shipper (which learns of cancels), the daemon's signal handlers (which stop it)
    and the Terraform run (which obeys both): cancel interrupts Terraform, force kills it."""

    def __init__(self, job_id: str = "") -> None:
        self.job_id = job_id
        self.canceled = threading.Event()
        # Set when the daemon itself stops the job (Ctrl-C), not the server: the job then ends as failed.
        self.shutdown_reason: str | None = None
        self._on_cancel: list[Callable[[], None]] = []
        self._on_force: list[Callable[[], None]] = []
        self._forced = False

    def on_cancel(self, callback: Callable[[], None], *, force: Callable[[], None] | None = None) -> None:
        self._on_cancel.append(callback)
        if force is not None:
            self._on_force.append(force)
        if self._forced and force is not None:
            force()
        elif self.canceled.is_set():
            callback()

    def cancel(self) -> None:
        self.canceled.set()
        for callback in list(self._on_cancel):
            callback()

    def force(self) -> None:
        self._forced = True
        self.canceled.set()
        for callback in list(self._on_force):
            callback()
