"""Readable template version names, ``<adjective>-<noun>-<n>`` (``n``: the template's how-manyth version), unique
within a template, as Coder names versions nobody named (its names are ``<adjective>_<noun><n>``-like)."""

from __future__ import annotations

import re
import secrets

# Plain, short words that read well together and mean nothing about the version.
ADJECTIVES = (
    "amber", "bold", "brave", "bright", "calm", "clever", "cosy", "crisp", "curious", "daring", "eager", "fair",
    "fancy", "fond", "gentle", "glad", "golden", "grand", "happy", "hardy", "honest", "jolly", "keen", "kind",
    "lively", "lucky", "mellow", "merry", "mighty", "neat", "nimble", "noble", "patient", "plucky", "polite",
    "proud", "quick", "quiet", "rapid", "ready", "shiny", "silent", "smooth", "snug", "steady", "sunny", "swift",
    "tidy", "vivid", "warm", "wise", "witty", "zesty",
)  # fmt: skip
NOUNS = (
    "badger", "beaver", "bison", "canary", "cedar", "comet", "crane", "daisy", "dolphin", "eagle", "falcon", "fern",
    "finch", "fox", "gecko", "heron", "ibis", "koala", "lark", "lemur", "lily", "lynx", "maple", "meadow", "moose",
    "newt", "orca", "otter", "owl", "panda", "pebble", "pine", "puffin", "quail", "raven", "river", "robin",
    "salmon", "seal", "sparrow", "spruce", "star", "stone", "swan", "tiger", "trout", "tulip", "walrus", "willow",
    "wombat", "wren", "yak",
)  # fmt: skip
# What a given name may be (Coder's rule): letters and digits, in parts joined by one of . _ -
VERSION_NAME_PATTERN = re.compile(r"^[a-zA-Z0-9]+(?:[._-][a-zA-Z0-9]+)*$")
MAX_VERSION_NAME = 64


def readable_name(number: int, taken: set[str]) -> str:
    """A fresh ``<adjective>-<noun>-<number>`` not in ``taken`` (names compared as they are stored)."""
    for _ in range(100):
        name = f"{secrets.choice(ADJECTIVES)}-{secrets.choice(NOUNS)}-{number}"
        if name not in taken:
            return name
    return f"{secrets.choice(ADJECTIVES)}-{secrets.choice(NOUNS)}-{number}-{secrets.token_hex(3)}"


def version_name_problem(name: str) -> str:
    """Why ``name`` cannot name a version, or "" when it can."""
    if not 1 <= len(name) <= MAX_VERSION_NAME or not VERSION_NAME_PATTERN.match(name):
        return f"Use 1-{MAX_VERSION_NAME} letters and digits, in parts joined by a single '.', '_' or '-'."
    return ""
