"""Provisioner tags: normalisation, matching, and the RQ queue each tag set maps to (DESIGN.md "Tags").

A job waits on the queue named after its exact tag set and its priority; a daemon listens on the queues of every
subset of its own tags that it may serve, every high-priority queue before any low one. Redis only decides which
daemon wakes up: acquisition re-checks the match.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from itertools import combinations
from urllib.parse import quote

from protocol.channels import QUEUE_PREFIX

SCOPE_ORGANIZATION = "organization"
SCOPE_USER = "user"
RESERVED = ("scope", "owner")
MAX_DAEMON_TAGS = 8
UNTAGGED_ANY = "any"
UNTAGGED_ONLY = "untagged-only"
MAX_KEY_CHARS = 64
MAX_VALUE_CHARS = 255
# Builds a person waits for run before automatic ones (the lifecycle executor's): a second queue per tag set.
PRIORITY_HIGH, PRIORITY_LOW = "high", "low"
PRIORITIES = (PRIORITY_HIGH, PRIORITY_LOW)
# Percent-encoding leaves no "#" in a tag set's part of the name, so the suffix cannot be mistaken for a tag.
LOW_PRIORITY_SUFFIX = "#low"

Tags = dict[str, str]


class TagError(ValueError):
    pass


def normalise_tags(tags: Mapping[str, str] | None, user_id: str | None = None) -> Tags:
    """Coder's MutateTags: ``scope`` is organization unless it is user (then ``owner`` is the user's id)."""
    result = {str(key): str(value) for key, value in (tags or {}).items()}
    for key, value in result.items():
        if not key or "\x00" in key + value or len(key) > MAX_KEY_CHARS or len(value) > MAX_VALUE_CHARS:
            raise TagError(
                f"invalid tag {key[:80]!r}: keys are 1-{MAX_KEY_CHARS} and values up to {MAX_VALUE_CHARS} characters"
            )
    if result.get("scope") == SCOPE_USER and user_id:
        result["owner"] = user_id
    else:
        result["scope"] = SCOPE_ORGANIZATION
        result["owner"] = ""
    return result


def is_untagged(tags: Mapping[str, str]) -> bool:
    return set(tags) <= set(RESERVED)


def daemon_can_run(daemon_tags: Mapping[str, str], job_tags: Mapping[str, str], untagged_rule: str) -> bool:
    """A job runs on a daemon whose tags contain it; under ``untagged-only`` untagged jobs need untagged daemons."""
    if untagged_rule == UNTAGGED_ONLY and is_untagged(job_tags) and job_tags.get("scope") == SCOPE_ORGANIZATION:
        return dict(job_tags) == dict(daemon_tags)
    return all(daemon_tags.get(key) == value for key, value in job_tags.items())


def queue_name(tags: Mapping[str, str], priority: str = PRIORITY_HIGH, namespace: str = "") -> str:
    """A stable, unambiguous queue name for a normalised tag set (keys sorted, parts percent-encoded), a priority
    and an organisation's namespace ("" for the default organisation, whose names are those from before there were
    organisations, so that queued jobs survive the upgrade). Without the priority it also names the tag set itself
    (the queue-depth metric's label). Percent-encoding leaves no "/" in the tags' part, so a namespace, which ends
    in one, cannot be mistaken for tags."""
    tag_part = "&".join(f"{quote(key, safe='')}={quote(tags[key], safe='')}" for key in sorted(tags))
    name = QUEUE_PREFIX + (f"{quote(namespace, safe='')}/" if namespace else "") + tag_part
    return name + LOW_PRIORITY_SUFFIX if priority == PRIORITY_LOW else name


def daemon_queue_names(daemon_tags: Mapping[str, str], untagged_rule: str, namespace: str = "") -> list[str]:
    """The queues of every subset of the daemon's free tags, always with its own scope and owner.

    Jobs carry the reserved keys too, so only the other tags vary; their count is capped, which keeps this at
    most 2 * 2**8 queues, all in the daemon's organisation (``namespace``, as in :func:`queue_name`). Every
    high-priority queue comes first (an RQ worker takes from the first queue that has a job), then within each
    priority the most specific, so a daemon prefers the work only it can do.
    """
    free = sorted(key for key in daemon_tags if key not in RESERVED)
    if len(free) > MAX_DAEMON_TAGS:
        raise TagError(f"a provisioner daemon may have at most {MAX_DAEMON_TAGS} tags besides scope and owner")
    reserved = {key: daemon_tags[key] for key in RESERVED}
    names = []
    for size in range(len(free), -1, -1):
        for subset in combinations(free, size):
            job_tags = {**reserved, **{key: daemon_tags[key] for key in subset}}
            if daemon_can_run(daemon_tags, job_tags, untagged_rule):
                names.append(queue_name(job_tags, namespace=namespace))
    return names + [name + LOW_PRIORITY_SUFFIX for name in names]


def format_tags(tags: Mapping[str, str]) -> str:
    """``k=v`` pairs for people, reserved keys left out unless they say something (a user scope)."""
    shown = {key: value for key, value in tags.items() if key not in RESERVED}
    if tags.get("scope") == SCOPE_USER:
        shown = {"scope": SCOPE_USER, **shown}
    return " ".join(f"{key}={value}" for key, value in sorted(shown.items())) or "untagged"


def parse_tag_arguments(pairs: list[str]) -> Tags:
    """``["k=v", ...]`` (CLI and form input) to a dict, split on the first ``=``."""
    tags: Tags = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise TagError(f"tags look like key=value, got {pair!r}")
        tags[key.strip()] = value.strip()
    return tags


# Tags chosen by parameters (data "coder_workspace_tags"): each value is a template in which ``${name}`` stands
# for the value of the parameter ``name`` and ``$$`` for a dollar sign; the import made it (variables and locals
# already substituted), the server fills it in for each build.
_TAG_TEMPLATE_PART = re.compile(r"\$\$|\$\{([^}]*)\}")


def render_tag_template(template: str, parameters: Mapping[str, str]) -> str:
    """The tag value for a build with these parameter values (a parameter without a value gives "")."""
    return _TAG_TEMPLATE_PART.sub(lambda match: "$" if match.group(0) == "$$" else parameters.get(match.group(1), ""),
                                  template)  # fmt: skip


def literal_tag_part(text: str) -> str:
    """``text`` as a part of a tag template that stands for itself."""
    return text.replace("$", "$$")


def parameter_tag_part(name: str) -> str:
    return "${" + name + "}"
