"""The Insights page's charts, laid out here and drawn by the template as inline SVG: no charting script, nothing
but presentation attributes and classes of static/slipway.css, so the charts render under the dashboard's strict
Content-Security-Policy (no inline style, no inline script). Each chart carries its numbers as a table too."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date

# The drawing's own units (the SVG scales to the card's width, text with it).
WIDTH = 720
HEIGHT = 180
LEFT, RIGHT, TOP, BOTTOM = 48, 8, 12, 26
LABEL_WIDTH = 170  # horizontal bars: the names' column
ROW_HEIGHT = 28
NICE_STEPS = (1, 2, 2.5, 5, 10)


@dataclass(frozen=True)
class Series:
    """One kind of value per day: a bar segment (stacked in order) or a line; ``css`` names its colour."""

    name: str
    css: str
    values: Sequence[float | None]


@dataclass
class Rect:
    x: float
    y: float
    width: float
    height: float
    css: str
    title: str


@dataclass
class Text:
    x: float
    y: float
    label: str
    anchor: str = "middle"


@dataclass
class Chart:
    key: str
    title: str
    desc: str
    height: int = HEIGHT
    rects: list[Rect] = field(default_factory=list)
    lines: list[tuple[str, str]] = field(default_factory=list)  # (css, "x,y x,y …")
    dots: list[Rect] = field(default_factory=list)
    texts: list[Text] = field(default_factory=list)
    grid: list[float] = field(default_factory=list)
    legend: list[tuple[str, str]] = field(default_factory=list)  # (css, name)
    headers: list[str] = field(default_factory=list)
    rows: list[list[str]] = field(default_factory=list)

    @property
    def width(self) -> int:
        return WIDTH

    @property
    def plot_left(self) -> int:
        return LEFT

    @property
    def plot_right(self) -> int:
        return WIDTH - RIGHT

    @property
    def empty(self) -> bool:
        return not self.rows


def nice_max(value: float) -> float:
    """The smallest 1, 2, 2.5 or 5 × 10ⁿ at or above ``value`` (axes end on a round number)."""
    if value <= 0:
        return 1.0
    power = 10.0 ** math.floor(math.log10(value))
    return next(step * power for step in NICE_STEPS if step * power >= value)


@dataclass(frozen=True)
class Scale:
    """Where day ``n`` and a value land in the plot."""

    days: int
    peak: float

    @property
    def band(self) -> float:
        return (WIDTH - LEFT - RIGHT) / self.days

    def x(self, n: float) -> float:
        return LEFT + self.band * n

    def y(self, value: float) -> float:
        return TOP + (HEIGHT - TOP - BOTTOM) * (1 - value / self.peak)


Period = tuple[date, date]  # its first and last day (the same day for a chart per day)


def period_label(period: Period) -> str:
    first, last = period
    return first.isoformat() if first == last else f"{first.isoformat()} to {last.isoformat()}"


def per_day(
    key: str,
    title: str,
    desc: str,
    periods: Sequence[Period],
    series: Sequence[Series],
    *,
    lines: bool = False,
    unit: str = "",
    fmt: str = "{:g}",
    period_name: str = "Day",
) -> Chart:
    """A chart of values per day, or per longer period (weeks, for a long range): stacked bars (builds, people) or
    lines (p50 and p95, broken where a period has no value). Its table has a row per period."""
    chart = Chart(key, title, desc, legend=[(s.css, s.name) for s in series] if len(series) > 1 else [])
    chart.headers = [period_name, *(f"{s.name} ({unit})" if unit else s.name for s in series)]
    labels = [period_label(period) for period in periods]
    chart.rows = [[label, *(_shown(s.values[n], fmt) for s in series)] for n, label in enumerate(labels)]
    days = [first for first, _ in periods]
    if not days:
        return chart
    if lines:
        peak = max((value or 0 for s in series for value in s.values), default=0)
    else:
        peak = max(sum(s.values[n] or 0 for s in series) for n in range(len(days)))
    scale = Scale(len(days), nice_max(peak))
    _axes(chart, scale, days)
    if lines:
        for s in series:
            _line(chart, scale, labels, s, f" {unit}" if unit else "", fmt)
    else:
        _stacked_bars(chart, scale, labels, series, fmt)
    return chart


def _axes(chart: Chart, scale: Scale, days: Sequence[date]) -> None:
    """Grid lines at 0, half and the top, labelled; the first, middle and last day under the plot."""
    for fraction in (0, 0.5, 1):
        y = round(scale.y(scale.peak * fraction), 1)
        chart.grid.append(y)
        chart.texts.append(Text(LEFT - 4, y + 4, _shown(scale.peak * fraction, "{:g}"), "end"))
    last = len(days) - 1
    for n in sorted({0, len(days) // 2, last}):
        anchor, offset = ("start", 0.0) if n == 0 else ("end", 1.0) if n == last else ("middle", 0.5)
        chart.texts.append(Text(round(scale.x(n + offset), 1), HEIGHT - 6, days[n].strftime("%b %d"), anchor))


def _line(chart: Chart, scale: Scale, labels: Sequence[str], series: Series, unit: str, fmt: str) -> None:
    segment: list[str] = []
    for n, value in enumerate([*series.values, None]):
        if value is None:
            if segment:
                chart.lines.append((series.css, " ".join(segment)))
            segment = []
            continue
        x, y = round(scale.x(n + 0.5), 1), round(scale.y(value), 1)
        segment.append(f"{x},{y}")
        title = f"{labels[n]}: {series.name} {_shown(value, fmt)}{unit}"
        chart.dots.append(Rect(x - 2, y - 2, 4, 4, series.css, title))


def _stacked_bars(chart: Chart, scale: Scale, labels: Sequence[str], series: Sequence[Series], fmt: str) -> None:
    gap = min(scale.band * 0.2, 4)
    for n, label in enumerate(labels):
        below = 0.0
        for s in series:
            value = s.values[n] or 0
            if value <= 0:
                continue
            top = scale.y(below + value)
            height = scale.y(below) - top
            title = f"{label}: {s.name} {_shown(value, fmt)}"
            chart.rects.append(
                Rect(
                    round(scale.x(n) + gap / 2, 2),
                    round(top, 2),
                    round(scale.band - gap, 2),
                    round(height, 2),
                    s.css,
                    title,
                )
            )
            below += value


def ranked(key: str, title: str, desc: str, items: Sequence[tuple[str, float]], *, unit: str, fmt: str) -> Chart:
    """Horizontal bars, one per named item (apps by hours, workspaces by status), longest first."""
    chart = Chart(key, title, desc, height=max(len(items), 1) * ROW_HEIGHT + 4)
    chart.headers = ["Name", unit]
    chart.rows = [[name, _shown(value, fmt)] for name, value in items]
    peak = max((value for _, value in items), default=0) or 1
    room = WIDTH - LABEL_WIDTH - 70
    for n, (name, value) in enumerate(items):
        top = n * ROW_HEIGHT + 2
        width = max(room * value / peak, 1)
        chart.texts.append(Text(0, top + 19, name[:20], "start"))
        title = f"{name}: {_shown(value, fmt)} {unit}"
        chart.rects.append(Rect(LABEL_WIDTH, top + 6, round(width, 2), ROW_HEIGHT - 12, "chart-bar", title))
        chart.texts.append(Text(round(LABEL_WIDTH + width + 6, 2), top + 19, _shown(value, fmt), "start"))
    return chart


def _shown(value: float | None, fmt: str) -> str:
    return "–" if value is None else fmt.format(value)
