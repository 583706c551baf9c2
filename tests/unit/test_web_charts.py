"""The server-drawn charts: bars scale to the largest value, and every text is escaped."""

from __future__ import annotations

import re

from workerpool.web.charts import HEIGHT, MARGIN_BOTTOM, MARGIN_TOP, Bar, bar_chart


def test_bars_scale_to_the_largest_and_text_is_escaped():
    svg = str(
        bar_chart(
            "<b>done</b>",
            [Bar("<i>12:00</i>", 2), Bar("12:01", 4), Bar("12:02", 0)],
            'done"x',
            note="a&b",
        )
    )
    heights = [float(h) for h in re.findall(r'<rect [^>]*height="([\d.]+)"', svg)]
    full = HEIGHT - MARGIN_BOTTOM - MARGIN_TOP
    assert heights == [full / 2, full, 0.0]
    assert "<b>" not in svg and "&lt;b&gt;done&lt;/b&gt;" in svg
    assert "<i>" not in svg and "&lt;i&gt;12:00&lt;/i&gt;: 2" in svg
    assert 'class="chart done&#34;x"' in svg and "a&amp;b" in svg


def test_an_empty_chart_still_draws():
    svg = str(bar_chart("nothing", [], "dead"))
    assert svg.startswith("<svg") and svg.endswith("</svg>") and "<rect" not in svg
