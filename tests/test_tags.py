"""Reference §2's truth table for provisioner tags, and the queues a daemon listens on."""

from __future__ import annotations

import pytest

from protocol.tags import (
    UNTAGGED_ANY,
    UNTAGGED_ONLY,
    TagError,
    daemon_can_run,
    daemon_queue_names,
    normalise_tags,
    queue_name,
)

AAA, BBB = "aaa", "bbb"
ORG = {"scope": "organization", "owner": ""}


def org(**tags: str) -> dict[str, str]:
    return {**ORG, **tags}


def user(owner: str, **tags: str) -> dict[str, str]:
    return {"scope": "user", "owner": owner, **tags}


# (daemon tags, job tags, runs under Coder's rule "untagged-only", runs under the documented default "any")
TRUTH_TABLE = [
    (org(), org(), True, True),
    (org(env="prod"), org(env="prod"), True, True),
    (org(env="prod", dc="ny"), org(env="prod"), True, True),
    (org(env="prod", dc="ny"), org(env="prod", dc="ny"), True, True),
    (user(AAA), user(AAA), True, True),
    (user(AAA, env="prod"), user(AAA), True, True),
    (user(AAA, env="prod"), user(AAA, env="prod"), True, True),
    (user(AAA, env="prod", dc="ny"), user(AAA, env="prod"), True, True),
    (user(AAA, env="prod", dc="ny"), user(AAA, env="prod", dc="ny"), True, True),
    (org(), org(env="prod"), False, False),
    (org(env="prod"), org(), False, True),  # the only row the two rules disagree on
    (org(env="prod"), org(env="prod", dc="ny"), False, False),
    (org(env="prod", dc="ny"), org(env="prod", dc="chicago"), False, False),
    (user(AAA), org(), False, False),
    (user(AAA), user(BBB), False, False),
    (org(), user(AAA), False, False),
    (org(), user(AAA, env="prod"), False, False),
    (user(AAA), user(AAA, env="prod"), False, False),
    (user(AAA, env="prod"), user(AAA, env="prod", dc="ny"), False, False),
    (user(AAA, env="prod", dc="chicago"), user(AAA, env="prod", dc="ny"), False, False),
]


@pytest.mark.parametrize(("daemon", "job", "strict", "default"), TRUTH_TABLE)
def test_truth_table(daemon: dict[str, str], job: dict[str, str], strict: bool, default: bool) -> None:
    assert daemon_can_run(daemon, job, UNTAGGED_ONLY) is strict
    assert daemon_can_run(daemon, job, UNTAGGED_ANY) is default


@pytest.mark.parametrize(("daemon", "job", "strict", "default"), TRUTH_TABLE)
def test_queues_route_exactly_like_the_table(
    daemon: dict[str, str], job: dict[str, str], strict: bool, default: bool
) -> None:
    """A daemon listens on a job's queue exactly when it may run the job."""
    assert (queue_name(job) in daemon_queue_names(daemon, UNTAGGED_ONLY)) is strict
    assert (queue_name(job) in daemon_queue_names(daemon, UNTAGGED_ANY)) is default


def test_normalisation() -> None:
    assert normalise_tags(None) == ORG
    assert normalise_tags({"scope": "user"}, "u1") == user("u1")
    assert normalise_tags({"scope": "user", "owner": "someone-else"}, "u1") == user("u1")
    assert normalise_tags({"scope": "nonsense", "owner": "x", "env": "a"}) == org(env="a")
    assert normalise_tags({"scope": "user"}) == ORG  # no user to scope to
    with pytest.raises(TagError):
        normalise_tags({"bad\x00key": "v"})


def test_queue_names_are_unambiguous() -> None:
    assert queue_name(org(a="b&c=d")) != queue_name(org(a="b", c="d"))
    assert queue_name(org(a="1", b="2")) == queue_name({"b": "2", "owner": "", "a": "1", "scope": "organization"})


def test_more_than_eight_daemon_tags_are_refused() -> None:
    assert len(daemon_queue_names(org(**{f"k{i}": "v" for i in range(8)}), UNTAGGED_ANY)) == 2 * 256  # two priorities
    with pytest.raises(TagError, match="at most 8 tags"):
        daemon_queue_names(org(**{f"k{i}": "v" for i in range(9)}), UNTAGGED_ANY)
