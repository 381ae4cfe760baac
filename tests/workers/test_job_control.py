"""JobControl: how a cancel (from the server) and a forced stop (the daemon's second Ctrl-C) reach Terraform."""

from __future__ import annotations

from workers.job_control import JobControl


def test_cancel_and_force_reach_every_step_even_the_ones_registered_later() -> None:
    control = JobControl("job-1")
    calls: list[str] = []
    control.on_cancel(lambda: calls.append("interrupt init"), force=lambda: calls.append("kill init"))
    control.cancel()
    assert calls == ["interrupt init"] and control.canceled.is_set()
    control.on_cancel(lambda: calls.append("interrupt plan"))  # a step that starts after the cancel
    assert calls[-1] == "interrupt plan"
    control.force()
    assert calls[-1] == "kill init"
    control.on_cancel(lambda: calls.append("interrupt apply"), force=lambda: calls.append("kill apply"))
    assert calls[-1] == "kill apply"  # after a forced stop a new step is killed, not merely interrupted
