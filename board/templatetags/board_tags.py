"""Small renderers for the dashboard: the 24-hour strip as SVG, ages and token counts.

The strip is built here, not in a template loop, because a page draws 96 cells per agent;
it holds only numbers and times we compute, never anything an agent wrote.
"""

from __future__ import annotations

from datetime import UTC, timedelta

from django import template
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from board.selectors import Cell

register = template.Library()


@register.simple_tag
def strip_svg(cells: list[Cell]) -> SafeString:
    rects = format_html_join(
        "",
        '<rect x="{}" y="0" width="0.86" height="2" class="cell{}">'
        "<title>{} UTC: {} message{}</title></rect>",
        (
            (
                c.index,
                c.level,
                c.starts_at.astimezone(UTC).strftime("%H:%M"),
                c.count,
                "" if c.count == 1 else "s",
            )
            for c in cells
        ),
    )
    total = sum(c.count for c in cells)
    return format_html(
        '<svg class="strip" viewBox="0 0 96 2" preserveAspectRatio="none" role="img" '
        'aria-label="Messages in the last 24 hours by quarter hour: {}">{}</svg>',
        total,
        rects,
    )


@register.filter
def age(delta: timedelta) -> str:
    """A reading's age in the largest whole unit that reads naturally."""
    minutes = int(delta.total_seconds() // 60)
    if minutes < 60:
        return f"{minutes} min"
    return f"{minutes // 60} h {minutes % 60} min"


@register.filter
def tokens(value: int) -> str:
    """1234567 -> 1.2M; people compare orders of magnitude here."""
    if value >= 1_000_000:
        return f"{value / 1_000_000:.1f}M"
    if value >= 10_000:
        return f"{value / 1_000:.0f}k"
    return f"{value:,}"


@register.filter
def points(value: float) -> str:
    return f"{abs(value):.0f}"
