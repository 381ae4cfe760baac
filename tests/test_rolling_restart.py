"""3 replicas behind a real reverse proxy (Debian's nginx) on PostgreSQL and Redis, with external daemons and log
viewers that reach them only through it. While builds print numbered lines and viewers follow them over SSE: a
rolling restart (SIGTERM one replica at a time, each draining first, the next once the restarted one is ready, as
Kubernetes rolls a Deployment), then kill -9 of a replica. Every build succeeds, every viewer gets every line exactly
once (resuming after its last event id, back within seconds), and nginx answers no 5xx."""

from __future__ import annotations

from pathlib import Path

from tests.support.postgres import PostgresCluster
from tests.support.rolling import lost_and_repeated, rolling_deployment, rolling_restart

# 100 ms apart: the builds outlast the rolling restart of three replicas and the kill after it.
LINES = 700
VIEWERS = 6
# A viewer's stream is back within EventSource's 1 s retry plus nginx's try of a replica that is gone; the bound is
# generous, for a machine that other runs share (bench/deploy.py measures it: p99 1.6 s).
BACK_WITHIN_SECONDS = 15.0


def test_a_rolling_restart_then_a_kill_lose_no_line_and_no_build_and_give_no_5xx(
    tmp_path: Path, postgres: PostgresCluster
) -> None:
    with rolling_deployment(tmp_path, postgres, daemons=2, drain=1, lines=LINES, pause=0.1, viewers=VIEWERS) as made:
        builds = made.start_builds(2, "rolled")
        followers, threads = made.follow(builds, VIEWERS)
        rolling_restart(made.replicas, lambda line: None)
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
