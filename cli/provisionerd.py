"""`slipway provisionerd start`: an external provisioner daemon (reference §3.4). Each flag is an env variable."""

from __future__ import annotations

import json
import logging
import re
import socket
import sys
from pathlib import Path
from typing import NoReturn

import click

from cli.client import key_value_pairs
from cli.config import load_partial_config
from protocol.values import parse_duration, parse_size

NAME_PATTERN = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,63}$")
USAGE_ERROR = 2


class JsonLines(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S%z"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["error"] = self.formatException(record.exc_info)
        return json.dumps(entry)


def _fail(message: str, code: int = USAGE_ERROR) -> NoReturn:
    click.echo(f"slipway provisionerd: {message}", err=True)
    sys.exit(code)


def _tags(values: tuple[str, ...]) -> dict[str, str]:
    # From the environment the tags arrive as one string: "env=prod region=eu" or "env=prod,region=eu".
    pairs = [part for value in values for part in re.split(r"[,\s]+", value.strip()) if part]
    try:
        return key_value_pairs(pairs, "--tag values")
    except click.BadParameter as exc:
        _fail(exc.message)


def _credential(psk: str | None, key: str | None, tags: dict[str, str]) -> tuple[dict[str, str], str]:
    """Exactly one credential; the second element says which, for the start-up line (never the secret)."""
    from workers.client import key_credential, psk_credential, token_credential

    if psk and key:
        _fail("use either --psk or --key, not both")
    if key:
        if tags:
            _fail("a provisioner key fixes the daemon's tags: drop --tag (or create a key with those tags)")
        return key_credential(key), "a provisioner key"
    if psk:
        return psk_credential(psk), "the pre-shared key"
    token = load_partial_config().token
    if not token:
        _fail("no credential: pass --key or --psk, run `slipway login`, or set SLIPWAY_SESSION_TOKEN")
    return token_credential(token), "your user token"


def _configure_logging(log_json: bool, verbose: bool) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonLines() if log_json else logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if verbose else logging.WARNING)
    logging.getLogger("workers").setLevel(logging.DEBUG if verbose else logging.INFO)


@click.group()
def provisionerd() -> None:
    """Run a provisioner daemon on this machine."""


@provisionerd.command()
@click.option(
    "--url", envvar="SLIPWAY_URL", show_envvar=True, help="The Slipway server. [default: from `slipway login`]"
)
@click.option(
    "--tag",
    "-t",
    "tags",
    multiple=True,
    metavar="KEY=VALUE",
    envvar="SLIPWAY_PROVISIONERD_TAGS",
    show_envvar=True,
    help="Serve jobs with these tags (repeatable; scope=user serves only your own jobs).",
)
@click.option(
    "--org",
    "organization",
    metavar="NAME",
    envvar="SLIPWAY_PROVISIONERD_ORGANIZATION",
    show_envvar=True,
    help="Run the jobs of this organisation (a provisioner key's own organisation needs none). [default: default]",
)
@click.option("--psk", envvar="SLIPWAY_PROVISIONER_DAEMON_PSK", show_envvar=True, help="The server's pre-shared key.")
@click.option("--key", envvar="SLIPWAY_PROVISIONER_DAEMON_KEY", show_envvar=True, help="A provisioner key.")
@click.option(
    "--name",
    envvar="SLIPWAY_PROVISIONER_DAEMON_NAME",
    show_envvar=True,
    help="How the daemon is listed. [default: this host's name]",
)
@click.option(
    "--cache-dir",
    type=click.Path(file_okay=False, path_type=Path),
    envvar="SLIPWAY_PROVISIONER_CACHE_DIR",
    show_envvar=True,
    help="Work dirs, providers and plugin cache. [default: ~/.cache/slipway/provisioner]",
)
@click.option(
    "--terraform-path",
    envvar="SLIPWAY_TERRAFORM_PATH",
    show_envvar=True,
    help="Terraform binary. [default: terraform/tofu on PATH, else the bundled one]",
)
@click.option(
    "--init-cache-size",
    metavar="SIZE",
    envvar="SLIPWAY_PROVISIONER_INIT_CACHE_SIZE",
    show_envvar=True,
    help="Keep each template's terraform init for reuse, up to this much (e.g. 2GiB; 0 turns it off). [default: 1GiB]",
)
@click.option(
    "--redis-url",
    envvar="SLIPWAY_PROVISIONER_REDIS_URL",
    show_envvar=True,
    help="Redis holding the job queues. [default: the address the server advertises]",
)
@click.option("--log-json", is_flag=True, envvar="SLIPWAY_PROVISIONER_LOG_JSON", help="Log one JSON object per line.")
@click.option("--verbose", "-v", is_flag=True, envvar="SLIPWAY_PROVISIONER_VERBOSE", help="Log debug detail.")
@click.option(
    "--prometheus-address",
    envvar="SLIPWAY_PROMETHEUS_ADDRESS",
    show_envvar=True,
    metavar="HOST:PORT",
    help="Serve this daemon's metrics for Prometheus here.",
)
@click.option(
    "--once",
    is_flag=True,
    envvar="SLIPWAY_PROVISIONERD_ONCE",
    help="Run one job, then exit 0 (for autoscalers: a Kubernetes Job, a KEDA ScaledJob).",
)
@click.option(
    "--idle-exit",
    metavar="DURATION",
    envvar="SLIPWAY_PROVISIONERD_IDLE_EXIT",
    show_envvar=True,
    help="Exit 0 after this long without a job, e.g. 5m (for autoscalers that start daemons on demand).",
)
def start(
    url: str | None,
    tags: tuple[str, ...],
    organization: str | None,
    psk: str | None,
    key: str | None,
    name: str | None,
    cache_dir: Path | None,
    terraform_path: str | None,
    init_cache_size: str | None,
    redis_url: str | None,
    log_json: bool,
    verbose: bool,
    prometheus_address: str | None,
    once: bool,
    idle_exit: str | None,
) -> None:
    """Take template imports and workspace builds from the server and run them with Terraform here.

    SIGTERM finishes the current job, then exits; Ctrl-C cancels it (Terraform's state is kept) and exits;
    a second Ctrl-C kills Terraform at once.
    """
    from workers.daemon import DaemonConfig, default_cache_dir, run_daemon
    from workers.metrics import split_host_port
    from workers.terraform.init_cache import DEFAULT_MAX_BYTES

    idle_exit_seconds = None
    if idle_exit:
        try:
            idle_exit_seconds = parse_duration(idle_exit)
        except ValueError as exc:
            _fail(f"--idle-exit: {exc}")
        if idle_exit_seconds < 1:
            _fail("--idle-exit must be at least 1s")
    init_cache_bytes = DEFAULT_MAX_BYTES
    if init_cache_size:
        try:
            init_cache_bytes = parse_size(init_cache_size)
        except ValueError as exc:
            _fail(f"--init-cache-size: {exc}")
    server = (url or load_partial_config().url).rstrip("/")
    if not server.startswith(("http://", "https://")):
        _fail("no server: pass --url https://… (or set SLIPWAY_URL, or run `slipway login`)")
    wanted = _tags(tags)
    credential, credential_name = _credential(psk, key, wanted)
    name = name or socket.gethostname().split(".")[0]
    if not NAME_PATTERN.match(name):
        _fail(f"--name {name!r}: use 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit")
    if prometheus_address:
        try:
            split_host_port(prometheus_address)
        except ValueError as exc:
            _fail(f"--prometheus-address: {exc}")
    _configure_logging(log_json, verbose)
    shown = " ".join(f"{k}={v}" for k, v in sorted(wanted.items())) or ("the key's tags" if key else "untagged")
    where = f" of organisation {organization}" if organization else ""
    click.echo(f"slipway provisionerd: {name} serving {shown}{where} for {server}, with {credential_name}", err=True)
    if not wanted and not key:
        click.echo(
            "  An untagged daemon takes untagged jobs (and, under the server's untagged-only rule, only those).",
            err=True,
        )
    config = DaemonConfig(
        url=server,
        credential=credential,
        redis_url=redis_url or None,
        name=name,
        tags=wanted,
        organization=organization or "",
        cache_dir=cache_dir or default_cache_dir(),
        terraform_path=terraform_path or None,
        init_cache_bytes=init_cache_bytes,
        prometheus_address=prometheus_address or None,
        once=once,
        idle_exit_seconds=idle_exit_seconds,
    )
    try:
        sys.exit(run_daemon(config))
    except KeyboardInterrupt:  # Ctrl-C before the worker took over the signals (e.g. waiting for the server)
        click.echo("slipway provisionerd: stopped", err=True)
        sys.exit(0)
