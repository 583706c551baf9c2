"""Figures: samples from repeated measurements, their median, a table and one JSON line each."""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Target:
    """A goal from the issue: ``value <op> bound`` (on the ratio when ``on_ratio``)."""

    op: str  # ">=" or "<="
    bound: float
    on_ratio: bool = False

    def met(self, value: float | None) -> bool | None:
        if value is None or math.isnan(value):
            return None
        return value >= self.bound if self.op == ">=" else value <= self.bound

    def describe(self, unit: str) -> str:
        what = "x" if self.on_ratio else f" {unit}"
        return f"{self.op} {self.bound:g}{what}"


@dataclass
class Figure:
    """One named quantity measured ``len(samples)`` times; ``value`` is the median."""

    name: str
    unit: str
    samples: list[float] = field(default_factory=list)
    ratio_to: str | None = None
    target: Target | None = None
    note: str = ""
    also_to: str | None = None  # a second reference, its ratio printed beside the first

    @property
    def value(self) -> float | None:
        return statistics.median(self.samples) if self.samples else None


class Report:
    """The figures of one run, in the order they were first declared."""

    def __init__(self) -> None:
        self.figures: dict[str, Figure] = {}

    def declare(
        self,
        name: str,
        unit: str,
        *,
        ratio_to: str | None = None,
        target: Target | None = None,
        note: str = "",
        also_to: str | None = None,
    ) -> Figure:
        """``ratio_to``: the reference of ``ratio`` (and of a target on the ratio);
        ``also_to``: a second one, whose ratio is printed too (``also_ratio``)."""
        if name not in self.figures:
            self.figures[name] = Figure(
                name, unit, ratio_to=ratio_to, target=target, note=note, also_to=also_to
            )
        return self.figures[name]

    def add(self, name: str, value: float) -> None:
        self.figures[name].samples.append(float(value))

    def ratio(self, figure: Figure, to: str | None = None) -> float | None:
        """``median(figure) / median(reference)``, both measured in this run; the reference is
        ``to``, else the figure's ``ratio_to``."""
        name = to or figure.ratio_to
        if name is None:
            return None
        reference = self.figures.get(name)
        if reference is None or not reference.value or figure.value is None:
            return None
        return figure.value / reference.value

    def met(self, figure: Figure) -> bool | None:
        if figure.target is None:
            return None
        checked = self.ratio(figure) if figure.target.on_ratio else figure.value
        return figure.target.met(checked)

    def as_dicts(self) -> list[dict]:
        return [self.as_dict(f) for f in self.figures.values() if f.samples]

    def as_dict(self, figure: Figure) -> dict:
        """One figure's JSON object; ``also_ratio`` and ``also_ratio_to`` only on a figure
        with a second reference."""
        ratio = self.ratio(figure)
        out = {
            "name": figure.name,
            "value": _round(figure.value),
            "unit": figure.unit,
            "median_of": len(figure.samples),
            "samples": [_round(s) for s in figure.samples],
            "ratio": None if ratio is None else round(ratio, 3),
            "ratio_to": figure.ratio_to,
            "target": figure.target.describe(figure.unit) if figure.target else None,
            "met": self.met(figure),
        }
        if figure.also_to is not None:
            also = self.ratio(figure, figure.also_to)
            out["also_ratio"] = None if also is None else round(also, 3)
            out["also_ratio_to"] = figure.also_to
        return out

    def json_lines(self) -> list[str]:
        return [json.dumps(d, sort_keys=False) for d in self.as_dicts()]

    def table(self) -> str:
        rows = [("figure", "median", "unit", "runs", "min-max", "ratio", "target", "met")]
        for d in self.as_dicts():
            ratio = _ratio_cell(d.get("ratio"), d["ratio_to"])
            also = _ratio_cell(d.get("also_ratio"), d.get("also_ratio_to"))
            ratio = f"{ratio}; {also}" if ratio and also else ratio or also
            met = {True: "yes", False: "NO", None: ""}[d["met"]]
            spread = f"{_fmt(min(d['samples']))}-{_fmt(max(d['samples']))}"
            rows.append(
                (
                    d["name"],
                    _fmt(d["value"]),
                    d["unit"],
                    str(d["median_of"]),
                    spread,
                    ratio,
                    d["target"] or "",
                    met,
                )
            )
        return markdown_table(rows)


def markdown_table(rows: Sequence[Sequence[str]], numeric: Iterable[int] = (1, 3)) -> str:
    """``rows[0]`` is the heading; the ``numeric`` columns are right-aligned."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    columns = set(numeric)
    right = [i in columns for i in range(len(widths))]

    def line(row: Sequence[str]) -> str:
        cells = [
            c.rjust(w) if num else c.ljust(w) for c, w, num in zip(row, widths, right, strict=True)
        ]
        return "| " + " | ".join(cells) + " |"

    rule = (
        "|"
        + "|".join(
            ("-" * (w + 1) + ":") if num else "-" * (w + 2)
            for w, num in zip(widths, right, strict=True)
        )
        + "|"
    )
    return "\n".join([line(rows[0]), rule, *(line(r) for r in rows[1:])])


def percentile(values: Sequence[float], p: float) -> float:
    """The ``p``-th percentile (0..100) with linear interpolation between closest ranks."""
    if not values:
        raise ValueError("percentile of no values")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * p / 100.0
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def _round(value: float | None) -> float | None:
    if value is None:
        return None
    return round(value, 3) if abs(value) < 100 else round(value, 1)


def _fmt(value: float | None) -> str:
    if value is None:
        return "-"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def _ratio_cell(ratio: float | None, to: str | None) -> str:
    return "" if ratio is None else f"{ratio:.2f}x {_short(to)}"


def _short(name: str | None) -> str:
    """A reference's name without its unit suffix, for the table's ratio column."""
    name = name or ""
    for suffix in ("_per_s", "_ms"):
        name = name.removesuffix(suffix)
    return name
