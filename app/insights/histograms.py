"""Durations kept so that they add up: a histogram with buckets growing by a fixed ratio (the idea of DDSketch), so
that the p50 and p95 of several templates' builds on a day are read from the sum of their histograms, within
ACCURACY of the true nearest-rank value, however many builds there were. One template's or the whole deployment's
percentiles stay exact (the rollup keeps them as plain numbers too); these serve any other choice of templates.

Stored as JSON: {"bucket": count}, the bucket a whole number (a duration of ``d`` seconds is in bucket
``ceil(log(d) / log(GAMMA))``), sorted so that the same durations always give the same text."""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterable, Mapping

# Any value read from a histogram is within 2 % of a duration some build really took.
ACCURACY = 0.02
GAMMA = (1 + ACCURACY) / (1 - ACCURACY)
_LOG_GAMMA = math.log(GAMMA)
# Shorter durations count as this (a build takes longer; a zero would have no logarithm).
SMALLEST_SECONDS = 0.01


def bucket(seconds: float) -> int:
    return math.ceil(math.log(max(seconds, SMALLEST_SECONDS)) / _LOG_GAMMA)


def representative(index: int) -> float:
    """The value that stands for a bucket: the one whose relative distance to both of its edges is ACCURACY."""
    return 2 * GAMMA**index / (GAMMA + 1)


def encode(durations: Iterable[float]) -> str:
    counts = Counter(bucket(seconds) for seconds in durations)
    return json.dumps({str(index): counts[index] for index in sorted(counts)}, separators=(",", ":"))


def add(total: Counter[int], text: str) -> None:
    for index, count in json.loads(text).items():
        total[int(index)] += int(count)


def percentile(counts: Mapping[int, int], share: float) -> float | None:
    """Nearest rank, as app/insights/rollup.py's percentile: the bucket holding the value at that rank."""
    size = sum(counts.values())
    if size == 0:
        return None
    rank = max(math.ceil(share * size), 1)
    seen = 0
    for index in sorted(counts):
        seen += counts[index]
        if seen >= rank:
            return representative(index)
    raise AssertionError("unreachable: the ranks add up to the size")
