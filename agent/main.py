"""The agent process (README "What the agent does"): the control connection, the first-manifest start-up, and
the graceful shutdown on SIGTERM or SIGINT."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import logging.handlers
import os
import signal
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine
from functools import partial
from pathlib import Path
from typing import Any

from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed

from agent import __version__, git
from agent.api import AgentAPI, AgentAPIError, Backoff, ProblemLog, retry
from agent.apphealth import AppHealthReporter
from agent.config import TOKEN_VARIABLES, AgentConfig, ConfigError, load_config
from agent.cron import run_on_schedule
from agent.environment import (
    SessionContext,
    build_environment,
    context_before_manifest,
    expand_directory,
    home_directory,
    script_bin_dir,
)
from agent.git_helper import GitHelperServer, SocketTaken
from agent.lifecycle import (
    OFF,
    READY,
    SHUTDOWN_ERROR,
    SHUTDOWN_TIMEOUT,
    SHUTTING_DOWN,
    START_ERROR,
    START_TIMEOUT,
    STARTING,
    LifecycleReporter,
)
from agent.logs import LogSender, log_line
from agent.metadata import MetadataCollector
from agent.ports import PortReporter
from agent.processes import ProcessGroups, make_undumpable, stop_passing_on_ignored_signals
from agent.runtime_dir import make_log_dir, make_private_dir
from agent.script_timings import ScriptTimingReporter
from agent.scripts import OUTPUT_CLOSE_WAIT, ScriptResult, ScriptRunner
from agent.ssh_service import SSHService
from agent.tunnels import TunnelDialer, control_dial
from protocol.agentapi import (
    CLOSE_NEW_TOKEN,
    CLOSE_OUTDATED,
    CLOSE_SERVER_RESTARTING,
    LifecycleState,
    Manifest,
    NewToken,
)
from protocol.codec import ProtocolError
from protocol.cron import CronError, parse_schedule
from protocol.resources import Script
from protocol.timings import STAGE_CRON, STAGE_STOP

log = logging.getLogger("agent")

CONFIG_ERROR_EXIT = 2
LOG_FILE_NAME = "slipway-agent.log"
LOG_FILE_MAX_BYTES = 5 * 1000 * 1000
# A control connection that stayed up this long was healthy: the next reconnect starts the back-off afresh.
STABLE_CONNECTION = 30.0
# The first retries of the control connection come soon (Coder's agent: 100 ms, doubling to 10 s). A new workspace's
# agent often starts while its build is still finishing, refused (401) until the server has recorded it; waiting
# the usual half second then would add that to every workspace's time to ready.
CONNECT_FIRST_RETRY = 0.1
STOP_LEFTOVERS_GRACE = 5.0
# At start-up, each flush; at shutdown, all of them together (logs, timings, the last lifecycle state).
FLUSH_TIMEOUT = 5.0
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def outcome(
    results: list[ScriptResult], timed_out: LifecycleState, failed: LifecycleState, succeeded: LifecycleState
) -> LifecycleState:
    if any(result.timed_out for result in results):
        return timed_out
    if any(not result.ok for result in results):
        return failed
    return succeeded


def _log_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("%s failed", task.get_name(), exc_info=task.exception())


def start_task(coroutine: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
    """A background task whose unexpected failure is logged when it happens, not when it is collected."""
    task = asyncio.create_task(coroutine, name=name)
    task.add_done_callback(_log_failure)
    return task


class Agent:
    def __init__(self, config: AgentConfig, api: AgentAPI | None = None) -> None:
        self._config = config
        self._api = api or AgentAPI(config.url, config.token)
        self._problems = ProblemLog(log)
        self._logs = LogSender(self._api.post_logs)
        self._lifecycle = LifecycleReporter(self._api)
        self._script_timings = ScriptTimingReporter(self._api)
        self._context = context_before_manifest()
        # Process groups of scripts, SSH sessions and terminals: what is left of them stops with the agent.
        self._leftovers = ProcessGroups()
        self._ssh = SSHService(lambda: self._context, self._leftovers)
        self._tunnels = TunnelDialer(self._api, self._ssh, lambda: self._context)
        self._manifest: Manifest | None = None
        self._scripts: ScriptRunner | None = None
        self._startup: asyncio.Task[None] | None = None
        self._cron: asyncio.Task[None] | None = None
        self._metadata: asyncio.Task[None] | None = None
        self._app_health: asyncio.Task[None] | None = None
        self._ssh_warm_up: asyncio.Task[None] | None = None
        self._stop_requested = asyncio.Event()
        self._git_helper = GitHelperServer(self._api, git.socket_path_for(config.log_dir))

    # Running ---------------------------------------------------------------------------------------------------

    def request_stop(self, reason: str = "asked to stop") -> None:
        if self._stop_requested.is_set():
            log.info("%s: already shutting down", reason)
            return
        log.info("%s: shutting down", reason)
        self._stop_requested.set()

    def _install_signal_handlers(self) -> None:
        loop = asyncio.get_running_loop()
        for signum in STOP_SIGNALS:
            with contextlib.suppress(NotImplementedError):  # Windows has no loop signal handlers
                loop.add_signal_handler(signum, self.request_stop, signal.Signals(signum).name)

    @staticmethod
    def _remove_signal_handlers() -> None:
        loop = asyncio.get_running_loop()
        for signum in STOP_SIGNALS:
            with contextlib.suppress(NotImplementedError):
                loop.remove_signal_handler(signum)

    async def run(self) -> int:
        """Serve until SIGTERM or SIGINT, shut down gracefully, and return the exit code."""
        self._install_signal_handlers()
        log.info("slipway agent %s connecting to %s (log dir %s)", __version__, self._config.url, self._config.log_dir)
        await self._start_git_helper()
        senders = [
            start_task(self._logs.run(), "the log sender"),
            start_task(self._lifecycle.run(), "lifecycle"),
            start_task(self._script_timings.run(), "script timings"),
            start_task(PortReporter(self._api.post_listening_ports).run(), "listening ports"),
        ]
        control = asyncio.create_task(self._control_loop())
        stop = asyncio.create_task(self._stop_requested.wait())
        await asyncio.wait({control, stop}, return_when=asyncio.FIRST_COMPLETED)
        exit_code = 0
        if control.done() and not control.cancelled() and control.exception() is not None:
            log.error("the control connection failed", exc_info=control.exception())
            exit_code = 1
        stop.cancel()
        await self._shut_down(control)
        for task in senders:
            task.cancel()
        await asyncio.gather(*senders, return_exceptions=True)
        await self._git_helper.close()
        await self._api.aclose()
        self._remove_signal_handlers()
        log.info("stopped")
        return exit_code

    async def _start_git_helper(self) -> None:
        """git's askpass and ssh helpers; a workspace without them still works, only git asks for passwords."""
        socket_dir = self._git_helper.socket_path.parent
        try:
            git.write_wrappers(script_bin_dir(self._config.log_dir))
            if socket_dir != self._config.log_dir:  # a log dir too deep for a socket: one of its own in the temp dir
                make_private_dir(socket_dir)
            await self._git_helper.start()
        except SocketTaken as exc:
            log.error(
                "the git helper did not start: %s. Another agent runs with the same log directory (%s); give each "
                "agent its own SLIPWAY_AGENT_LOG_DIR. Until then git here gets no linked accounts.",
                exc,
                self._config.log_dir,
            )
        except OSError as exc:
            log.warning("the git helper could not start (%s): git will not get linked accounts", exc)

    # The control connection ------------------------------------------------------------------------------------

    async def _control_loop(self) -> None:
        backoff = Backoff()
        while True:
            try:
                websocket = await retry(
                    self._api.connect_control, self._problems, backoff=Backoff(initial=CONNECT_FIRST_RETRY)
                )
            except AgentAPIError as exc:  # e.g. 404 from a server being upgraded: keep trying, never give up
                self._problems.report(str(exc))
                await asyncio.sleep(backoff.next_delay())
                continue
            connected_at = time.monotonic()
            try:
                await self._serve_control(websocket)
            except ConnectionClosed:
                pass
            except (ProtocolError, AgentAPIError) as exc:
                self._problems.report(f"the manifest could not be had: {exc}")
            finally:
                await websocket.close()
            if self._note_closed(websocket):
                continue
            if time.monotonic() - connected_at > STABLE_CONNECTION:
                backoff.reset()
            await asyncio.sleep(backoff.next_delay())

    def _note_closed(self, websocket: ClientConnection) -> bool:
        """Log why the control connection closed; True when the agent should connect again at once."""
        code, reason = websocket.close_code, websocket.close_reason
        if code == CLOSE_NEW_TOKEN:  # the new token is in hand: the workspace waits for this agent to use it
            log.info("the server handed this agent a new token (the workspace was claimed); reconnecting with it")
            return True
        if code == CLOSE_SERVER_RESTARTING:  # its replica is draining; the proxy sends the next one to another
            log.info("the server is restarting (%s %s); reconnecting at once", code, reason)
            return True
        if code == CLOSE_OUTDATED:
            self._problems.report(f"this agent no longer belongs to the workspace's current build (4001 {reason})")
        elif code is not None and code >= 4000:
            self._problems.report(f"the server closed the control connection ({code} {reason})")
        else:
            log.info("the control connection closed (%s); reconnecting", code)
        return False

    async def _serve_control(self, websocket: ClientConnection) -> None:
        manifest = await retry(self._api.get_manifest, self._problems)
        await self._apply_manifest(manifest)
        async for message in websocket:
            if not isinstance(message, str):
                continue
            new_token = _new_token(message)
            if new_token is not None:
                self._api.use_token(new_token.token)
                continue
            dial = control_dial(message)
            if dial is not None:
                self._tunnels.dial(dial)

    # The manifest ----------------------------------------------------------------------------------------------

    def _script_environment(self, script: Script) -> dict[str, str]:
        manifest = self._manifest or Manifest()
        return build_environment(
            manifest, self._config.log_dir, log_source_id=script.log_source_id, git_helper=self._git_helper.access
        )

    async def _apply_manifest(self, manifest: Manifest) -> None:
        previous, self._manifest = self._manifest, manifest
        environment = build_environment(manifest, self._config.log_dir, git_helper=self._git_helper.access)
        try:
            directory = expand_directory(manifest.directory, environment)
        except OSError as exc:
            log.warning("the directory %r cannot be used (%s); using the home directory", manifest.directory, exc)
            directory = Path(home_directory(environment))
        self._context = SessionContext(directory, environment, manifest.motd_file)
        try:
            await retry(lambda: self._api.post_startup(__version__, str(directory)), self._problems)
        except AgentAPIError as exc:
            log.warning("the server refused the start-up report: %s", exc)
        if previous is None:
            self._scripts = ScriptRunner(
                log_dir=self._config.log_dir,
                directory=directory,
                environment_for=self._script_environment,
                send_log=self._logs.add,
                leftovers=self._leftovers,
                send_timing=self._script_timings.report,
            )
            self._lifecycle.report(STARTING)
            self._startup = start_task(self._run_start_scripts(manifest, self._scripts), "the start scripts")
        else:
            if self._scripts is not None:
                self._scripts.directory = directory
            if previous.agent_id != manifest.agent_id:
                self._lifecycle.report(self._lifecycle.state)  # the rebuilt agent learns how far this one got
        self._restart_watchers(previous, manifest)

    def _restart_watchers(self, previous: Manifest | None, manifest: Manifest) -> None:
        """Metadata and app health start at once, and again when a later manifest changes their definitions."""
        if previous is None or previous.metadata != manifest.metadata:
            if self._metadata is not None:
                self._metadata.cancel()
            collector = MetadataCollector(
                manifest.metadata,
                self._api.post_metadata,
                directory=self._context.directory,
                environment=lambda: self._context.environment,
            )
            self._metadata = start_task(collector.run(), "metadata collection")
        if previous is None or previous.apps != manifest.apps:
            if self._app_health is not None:
                self._app_health.cancel()
            reporter = AppHealthReporter(manifest.apps, self._api.post_app_health)
            self._app_health = start_task(reporter.run(), "app health checks")

    # Scripts ---------------------------------------------------------------------------------------------------

    async def _run_start_scripts(self, manifest: Manifest, runner: ScriptRunner) -> None:
        scripts = manifest.start_scripts
        if scripts:
            log.info("running %d start script(s)", len(scripts))
        results = list(await asyncio.gather(*(runner.run(script, remember_group=True) for script in scripts)))
        if self._stop_requested.is_set():
            return  # shutdown reports the lifecycle from here on
        # Send the scripts' output and timings first: a workspace shown as ready then has its startup log (and its
        # build's waterfall its scripts) on the page. Both at once: two requests in a row would add one's round trip.
        await asyncio.gather(self._logs.flush(FLUSH_TIMEOUT), self._script_timings.flush(FLUSH_TIMEOUT))
        self._lifecycle.report(outcome(results, START_TIMEOUT, START_ERROR, READY))
        # Only now: loading SSH before this would have made the workspace's owner wait for it.
        self._ssh_warm_up = start_task(self._ssh.warm(), "the SSH service's warm-up")
        if manifest.cron_scripts:
            self._cron = start_task(self._run_cron_scripts(manifest.cron_scripts, runner), "the cron scheduler")

    async def _run_cron_scripts(self, scripts: tuple[Script, ...], runner: ScriptRunner) -> None:
        async with asyncio.TaskGroup() as group:
            for script in scripts:
                try:
                    schedule = parse_schedule(script.cron)
                except CronError as exc:
                    message = f"the cron schedule {script.cron!r} is invalid, so this script never runs: {exc}"
                    log.warning("script %r: %s", script.name, message)
                    self._logs.add(log_line(message, "error", script.log_source_id))
                    continue
                run = partial(runner.run, script, remember_group=True, stage=STAGE_CRON)
                group.create_task(run_on_schedule(schedule, run))

    # Shutdown --------------------------------------------------------------------------------------------------

    async def _shut_down(self, control: asyncio.Task[None]) -> None:
        started = self._manifest is not None
        if started:
            self._lifecycle.report(SHUTTING_DOWN)
        control.cancel()
        await asyncio.gather(control, return_exceptions=True)
        await self._tunnels.close_all()
        watchers = [task for task in (self._cron, self._metadata, self._app_health) if task is not None]
        for task in watchers:
            task.cancel()
        await asyncio.gather(*watchers, return_exceptions=True)
        results: list[ScriptResult] = []
        if self._scripts is not None and self._manifest is not None:
            stop_scripts = self._manifest.stop_scripts
            if stop_scripts:
                log.info("running %d stop script(s)", len(stop_scripts))
            stopping = (self._scripts.run(script, stage=STAGE_STOP) for script in stop_scripts)
            results = list(await asyncio.gather(*stopping))
        # What scripts, SSH sessions and terminals left running: the workspace is stopping.
        await self._leftovers.stop(STOP_LEFTOVERS_GRACE)
        if self._startup is not None:
            await asyncio.wait({self._startup}, timeout=OUTPUT_CLOSE_WAIT + 2)
            self._startup.cancel()
            await asyncio.gather(self._startup, return_exceptions=True)
        # The stop scripts' output before "off", as their output comes before "ready" at start. One deadline for
        # all that is sent: an agent whose server is gone (or refuses its token) stops within it.
        deadline = time.monotonic() + FLUSH_TIMEOUT
        if not await self._flush_until(self._logs.flush, deadline):
            log.warning("%d log lines could not be sent before exiting", self._logs.unsent_lines)
        await self._flush_until(self._script_timings.flush, deadline)
        if started:
            self._lifecycle.report(outcome(results, SHUTDOWN_TIMEOUT, SHUTDOWN_ERROR, OFF))
            if not await self._flush_until(self._lifecycle.flush, deadline):
                log.warning("the server did not take the last lifecycle report in time")

    async def _flush_until(self, flush: Callable[[float], Awaitable[bool]], deadline: float) -> bool:
        """One of shutdown's flushes, until ``deadline`` (monotonic) or until the server refuses this agent's token
        (401: a workspace rebuilt or claimed), which no retry changes. True if everything went."""
        if self._api.refused.is_set():
            return False
        sending = asyncio.ensure_future(flush(max(deadline - time.monotonic(), 0.0)))
        refused = asyncio.ensure_future(self._api.refused.wait())
        await asyncio.wait({sending, refused}, return_when=asyncio.FIRST_COMPLETED)
        refused.cancel()
        if not sending.done():
            sending.cancel()
            await asyncio.gather(sending, return_exceptions=True)
            return False
        return sending.result()


def _new_token(message: str) -> NewToken | None:
    if '"token"' not in message:  # dials, the usual message, go straight on
        return None
    try:
        return NewToken.loads(message)
    except ProtocolError:
        return None


def configure_logging(log_dir: Path) -> None:
    formatter = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    problem = None
    try:
        handlers.append(
            logging.handlers.RotatingFileHandler(
                log_dir / LOG_FILE_NAME, maxBytes=LOG_FILE_MAX_BYTES, backupCount=1, encoding="utf-8"
            )
        )
    except OSError as exc:
        problem = exc
    root = logging.getLogger()
    for handler in handlers:
        handler.setFormatter(formatter)
    root.handlers[:] = handlers
    root.setLevel(logging.INFO)
    # Every request would otherwise be a line: these libraries speak up only when something is wrong.
    for library in ("httpx", "httpcore", "asyncssh", "websockets"):
        logging.getLogger(library).setLevel(logging.WARNING)
    if problem is not None:
        log.warning("cannot write %s: %s; logging to stderr only", log_dir / LOG_FILE_NAME, problem)


def _fail(message: str) -> None:
    sys.stderr.write(f"slipway agent: {message}\n")
    sys.exit(CONFIG_ERROR_EXIT)


def main() -> None:
    try:
        config = load_config(os.environ)
    except ConfigError as exc:
        _fail(str(exc))
        return
    try:
        make_log_dir(config.log_dir, default=config.default_log_dir)
    except OSError as exc:
        _fail(f"the log directory {config.log_dir} cannot be used: {exc.strerror or exc}")
    for name in TOKEN_VARIABLES:  # nothing the agent starts may inherit the token
        os.environ.pop(name, None)
    stop_passing_on_ignored_signals()
    configure_logging(config.log_dir)
    try:
        make_undumpable()
    except OSError as exc:
        log.warning("processes of this OS user can read this agent's memory and environment: %s", exc)
    sys.exit(asyncio.run(Agent(config).run()))
