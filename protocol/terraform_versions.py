"""Terraform's version constraints (``required_version = ">= 1.6, < 2.0"``): which Terraform may run a template.

The server reads them from a template's archive when a version is uploaded, refuses constraints no Terraform can
satisfy, and routes the import and every build only to daemons whose Terraform satisfies them; the daemon says its
version when it registers. The syntax is Terraform's: comma-separated ``=``, ``!=``, ``>``, ``>=``, ``<``, ``<=``,
``~>`` (the rightmost part may grow: ``~> 1.6`` is ``>= 1.6, < 2.0``, ``~> 1.6.2`` is ``>= 1.6.2, < 1.7.0``) and
a bare version meaning ``=``. Prereleases (``1.9.0-beta1``) only satisfy constraints that name a prerelease.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

_VERSION = re.compile(r"^v?(\d+)(?:\.(\d+))?(?:\.(\d+))?(?:-([0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?$")
_CONSTRAINT = re.compile(r"^\s*(=|!=|>=|<=|>|<|~>)?\s*(\S+)\s*$")


class ConstraintError(ValueError):
    pass


@dataclass(frozen=True, order=True)
class Version:
    major: int
    minor: int
    patch: int
    # Sorts before the release: (0, "beta1") < (1, "").
    pre: tuple[int, str] = (1, "")
    # How many parts were written (``~>`` needs it).
    parts: int = 3

    @classmethod
    def parse(cls, text: str) -> Version:
        match = _VERSION.match(text.strip())
        if match is None:
            raise ConstraintError(f"{text.strip()!r} is not a version (like 1.9.8)")
        major, minor, patch, pre = match.groups()
        parts = 1 + (minor is not None) + (patch is not None)
        return cls(int(major), int(minor or 0), int(patch or 0), (0, pre) if pre else (1, ""), parts)

    @property
    def prerelease(self) -> bool:
        return self.pre[0] == 0

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}.{self.patch}" + (f"-{self.pre[1]}" if self.prerelease else "")


@dataclass(frozen=True)
class Constraint:
    operator: str
    version: Version

    def allows(self, version: Version) -> bool:
        if version.prerelease and (version.major, version.minor, version.patch) != (
            self.version.major, self.version.minor, self.version.patch,
        ):  # fmt: skip
            return False  # a prerelease satisfies only constraints about its own release
        key, bound = _key(version), _key(self.version)
        if self.operator == "=":
            return key == bound
        if self.operator == "!=":
            return key != bound
        if self.operator == ">":
            return key > bound
        if self.operator == ">=":
            return key >= bound
        if self.operator == "<":
            return key < bound
        if self.operator == "<=":
            return key <= bound
        upper = _pessimistic_upper(self.version)
        return bound <= key < upper

    def __str__(self) -> str:
        return f"{self.operator} {self.version}"


def _key(version: Version) -> tuple[int, int, int, tuple[int, str]]:
    return (version.major, version.minor, version.patch, version.pre)


def _pessimistic_upper(version: Version) -> tuple[int, int, int, tuple[int, str]]:
    if version.parts <= 2:
        return (version.major + 1, 0, 0, (0, ""))
    return (version.major, version.minor + 1, 0, (0, ""))


@functools.lru_cache(maxsize=256)
def parse_constraints(text: str) -> tuple[Constraint, ...]:
    """``">= 1.6, < 2.0"`` → its constraints; ConstraintError naming the part that does not parse."""
    constraints = []
    for part in text.split(","):
        if not part.strip():
            continue
        match = _CONSTRAINT.match(part)
        if match is None:
            raise ConstraintError(f"{part.strip()!r} is not a version constraint (like >= 1.6)")
        operator, version = match.groups()
        constraints.append(Constraint(operator or "=", Version.parse(version)))
    return tuple(constraints)


def satisfies(version: str, constraints: str) -> bool:
    """Whether Terraform ``version`` may run a template requiring ``constraints`` ("" requires nothing; an unknown
    version satisfies no requirement)."""
    wanted = parse_constraints(constraints)
    if not wanted:
        return True
    try:
        parsed = Version.parse(version)
    except ConstraintError:
        return False
    return all(constraint.allows(parsed) for constraint in wanted)


def satisfiable(constraints: str) -> bool:
    """Whether any Terraform could satisfy ``constraints``: one of the versions at their edges does, if any."""
    wanted = parse_constraints(constraints)
    candidates = set()
    for constraint in wanted:
        v = constraint.version
        for major, minor, patch in (
            (v.major, v.minor, v.patch), (v.major, v.minor, v.patch + 1), (v.major, v.minor + 1, 0),
            (v.major + 1, 0, 0), (v.major, v.minor, max(v.patch - 1, 0)),
        ):  # fmt: skip
            candidates.add(Version(major, minor, patch))
        if v.prerelease:
            candidates.add(v)
        if constraint.version.minor:
            candidates.add(Version(v.major, v.minor - 1, 0))
        if constraint.version.major:
            candidates.add(Version(v.major - 1, 99, 0))
    return not wanted or any(all(constraint.allows(candidate) for constraint in wanted) for candidate in candidates)
