"""Bar charts drawn on the server as inline SVG: no chart library, no script, nothing fetched.

Every text that reaches the SVG (labels, titles) goes through :func:`markupsafe.escape`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from markupsafe import Markup, escape

WIDTH, HEIGHT = 600, 140
MARGIN_LEFT, MARGIN_BOTTOM, MARGIN_TOP = 40, 20, 10


@dataclass(frozen=True)
class Bar:
    label: str  # shown on hover (the minute)
    value: int


def bar_chart(title: str, bars: Sequence[Bar], css_class: str, note: str = "") -> Markup:
    """A labelled bar chart of ``bars`` (left to right), with the largest value as its scale."""
    top = max((bar.value for bar in bars), default=0) or 1
    plot_w, plot_h = WIDTH - MARGIN_LEFT, HEIGHT - MARGIN_BOTTOM - MARGIN_TOP
    step = plot_w / max(len(bars), 1)
    parts = [
        f'<svg class="chart {escape(css_class)}" viewBox="0 0 {WIDTH} {HEIGHT}"'
        f' role="img" aria-label="{escape(title)}"><title>{escape(title)}</title>',
        f'<text x="0" y="{MARGIN_TOP + 8}" class="axis">{top}</text>',
        f'<text x="0" y="{HEIGHT - MARGIN_BOTTOM}" class="axis">0</text>',
        f'<line x1="{MARGIN_LEFT}" y1="{HEIGHT - MARGIN_BOTTOM}" x2="{WIDTH}"'
        f' y2="{HEIGHT - MARGIN_BOTTOM}" class="base"/>',
    ]
    for index, bar in enumerate(bars):
        height = plot_h * bar.value / top
        x = MARGIN_LEFT + index * step
        y = HEIGHT - MARGIN_BOTTOM - height
        parts.append(
            f'<rect x="{x:.1f}" y="{y:.1f}" width="{max(step - 2, 1):.1f}"'
            f' height="{height:.1f}" class="bar"><title>{escape(bar.label)}:'
            f" {bar.value}</title></rect>"
        )
    if bars:
        parts.append(
            f'<text x="{MARGIN_LEFT}" y="{HEIGHT - 4}" class="axis">{escape(bars[0].label)}</text>'
        )
        parts.append(
            f'<text x="{WIDTH}" y="{HEIGHT - 4}" class="axis end">{escape(bars[-1].label)}</text>'
        )
    if note:
        parts.append(
            f'<text x="{WIDTH}" y="{MARGIN_TOP + 8}" class="axis end">{escape(note)}</text>'
        )
    parts.append("</svg>")
    return Markup("".join(parts))
