"""3 replicas behind a real reverse proxy (Debian's nginx) on PostgreSQL and Redis, with external daemons and log
viewers that reach them only through it. While builds print numbered lines and viewers follow them over SSE: a
rolling restart (SIGTERM one replica at a time, each draining first, the next once the restarted one is ready, as
Kubernetes rolls a Deployment), then kill -9 of a replica. Every build succeeds, every viewer gets every line exactly
once (resuming after its last event id, back within seconds), and nginx answers no 5xx.

Meanwhile a person uses a running workspace (examples/local, its agent connected through nginx): its app open, an
SSH session held (`slipway ssh`), and its agent reached again and again over new tunnels. Each draining replica
ends what it holds with 4503 "server restarting": the agent reconnects at once, the app never fails, and an SSH
session that ends says why and is back at once."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.postgres import PostgresCluster
from tests.support.rolling import HeldOpen, lost_and_repeated, rolling_deployment, rolling_restart

# 100 ms apart: the builds outlast the rolling restart of three replicas and the kill after it.
LINES = 700
VIEWERS = 6
# A viewer's stream is back within EventSource's 1 s retry plus nginx's try of a replica that is gone; the bound is
# generous, for a machine that other runs share (bench/deploy.py measures it: p99 1.6 s).
BACK_WITHIN_SECONDS = 15.0
# The agent is back within a reconnect (at once on 4503) plus a probe's answer time (a dial sent while it was
# between connections is lost: that probe fails after 3 s); bench/deploy.py measures it (target p99 <= 5 s).
AGENT_BACK_WITHIN_SECONDS = 15.0
SSH_RESTARTING = "the server replica holding it is restarting; connect again now"


def assert_held_through_the_roll(held: HeldOpen) -> None:
    assert held.agent.answered > 0 and held.app.answered > 0
    # The app is served whichever replica a request reaches, and a replica ends no app request it took.
    assert held.app.failures == []
    # The agent was reached through the roll; each time it was out it was back quickly. A probe fails only for
    # the roll: its tunnel ended by a draining replica (4503), its dial refused while the agent was between
    # connections (409) or lost then (no answer: TimeoutError).
    assert held.agent.down_since is None, held.agent.failures
    assert all(seconds < AGENT_BACK_WITHIN_SECONDS for seconds in held.agent.out_seconds), held.agent
    expected = ("4503 (private use) server restarting", "HTTP 409", "TimeoutError")
    assert all(any(kind in failure for kind in expected) for failure in held.agent.failures), held.agent.failures
    # Every replica held a half of the SSH session's tunnel in turn: it ended, said why, and was back at once.
    assert held.ssh.ends, "the SSH session outlived three replicas that drained"
    unexplained = [(code, said) for code, said in held.ssh.ends if not (code == 1 and SSH_RESTARTING in said)]
    assert unexplained == [], "\n".join(f"exit {code}: {said!r}" for code, said in unexplained)
    assert len(held.ssh.back_seconds) == len(held.ssh.ends)
    assert max(held.ssh.back_seconds) < BACK_WITHIN_SECONDS, held.ssh.back_seconds


# Three replicas, a workspace, two builds and a roll: about 2.5 minutes alone, more on a machine other runs share.
@pytest.mark.timeout(600)
def test_a_rolling_restart_then_a_kill_lose_no_line_and_no_build_and_give_no_5xx(
    tmp_path: Path, postgres: PostgresCluster
) -> None:
    with rolling_deployment(tmp_path, postgres, daemons=2, drain=1, lines=LINES, pause=0.1, viewers=VIEWERS) as made:
        held = made.hold_workspace_open()
        builds = made.start_builds(2, "rolled")
        followers, threads = made.follow(builds, VIEWERS)
        rolling_restart(made.replicas, lambda line: None)
        held.stop()
        assert_held_through_the_roll(held)
        # Streams broke as each replica drained, and all came back through the proxy.
        assert sum(len(f.back_seconds) for f in followers) >= VIEWERS
        with made.admin() as admin:
            running = [admin.get(f"/provisionerjobs/{build['job']['id']}").json()["status"] for build in builds]
        assert running == ["running", "running"], "the builds ended before the kill: make them longer"
        # Drained replicas finish what they hold: nginx answered no 5xx during the rolling restart.
        assert [" ".join(fields) for fields in made.proxied() if fields[0].startswith("5")] == []
        before_kill = len(made.proxied())
        victim = made.replicas[0]
        victim.kill()  # kill -9 of the server and all it started; nginx sends new requests to the others
        outcomes, stored = made.finish(builds, threads)
        after_kill = made.proxied()[before_kill:]
    assert [outcome["status"] for outcome in outcomes] == ["succeeded", "succeeded"], outcomes
    assert [f.ended for f in followers] == ["succeeded"] * VIEWERS
    assert lost_and_repeated(followers, stored, LINES) == (0, 0, 0)
    back = [seconds for f in followers for seconds in f.back_seconds]
    assert max(back) < BACK_WITHIN_SECONDS, back
    # After the kill, only what was in flight on the killed replica can fail (a 502 nginx may not retry: a daemon's
    # POST, which the daemon sends again from its outbox); nothing else.
    killed = f'"127.0.0.1:{victim.server.port}"'
    failed = [fields for fields in after_kill if fields[0].startswith("5")]
    assert all(fields[:3] == ["502", "502", killed] for fields in failed), failed
