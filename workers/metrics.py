"""A daemon's own Prometheus metrics (`--prometheus-address`): what it is running and how its jobs went."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

# Coder's provisionerd job timing buckets.
DURATION_BUCKETS = (1, 10, 30, 60, 300, 600, 1800, 3600)


class JobMetrics:
    """Counts every job; the numbers are served only when the daemon was given an address."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.current = Gauge(
            "slipway_provisionerd_jobs_current", "Jobs this daemon is running now (0 or 1).", registry=self.registry
        )
        self.total = Counter(
            "slipway_provisionerd_jobs",
            "Jobs this daemon ran, by type and result.",
            ["type", "result"],
            registry=self.registry,
        )
        self.duration = Histogram(
            "slipway_provisionerd_job_duration_seconds",
            "How long this daemon's jobs took, by type and result.",
            ["type", "result"],
            buckets=DURATION_BUCKETS,
            registry=self.registry,
        )

    def started(self) -> None:
        self.current.inc()

    def finished(self, job_type: str, result: str, seconds: float) -> None:
        self.current.dec()
        self.total.labels(job_type, result).inc()
        self.duration.labels(job_type, result).observe(seconds)

    def serve(self, address: str) -> None:
        host, port = split_host_port(address)
        start_http_server(port, addr=host, registry=self.registry)


def split_host_port(address: str) -> tuple[str, int]:
    """``HOST:PORT`` (``:PORT`` means every interface) to its parts, or ValueError saying what is wrong."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"expected HOST:PORT, got {address!r}")
    return host.strip("[]") or "0.0.0.0", int(port)  # noqa: S104 - only when the operator asked for ":PORT"
