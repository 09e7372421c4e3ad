"""Small renderers for the dashboard: the 24-hour strip as SVG, ages and token counts.

The strip is built here, not in a template loop, because a page draws 96 cells per agent;
it holds only numbers and times we compute, never anything an agent wrote.
"""

from __future__ import annotations

import functools
import secrets
from datetime import UTC, datetime, timedelta

from django import template
from django.utils.safestring import SafeString

from board.selectors import CELL, CELLS, Cell

register = template.Library()


@functools.lru_cache(maxsize=8)
def _quarter_labels(start: datetime) -> tuple[str, ...]:
    """"HH:MM" of each quarter hour of a window: the same for every agent on a page."""
    return tuple((start + n * CELL).astimezone(UTC).strftime("%H:%M") for n in range(CELLS))


@register.simple_tag
def strip_svg(cells: list[Cell]) -> SafeString:
    """96 rects per agent, joined as plain strings: every value is an int or a time label we
    formatted, never text anyone wrote, so per-value escaping (a third of a busy page's
    render time) buys nothing here."""
    if not cells:
        return SafeString("")
    labels = _quarter_labels(cells[0].starts_at - cells[0].index * CELL)
    rects = "".join(
        f'<rect x="{int(c.index)}" y="0" width="0.86" height="2" class="cell{int(c.level)}">'
        f"<title>{labels[c.index]} UTC: {int(c.count)} message{'' if c.count == 1 else 's'}"
        "</title></rect>"
        for c in cells
    )
    total = int(sum(c.count for c in cells))
    return SafeString(
        '<svg class="strip" viewBox="0 0 96 2" preserveAspectRatio="none" role="img" '
        f'aria-label="Messages in the last 24 hours by quarter hour: {total}">{rects}</svg>'
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


@register.simple_tag
def form_key() -> str:
    """A fresh idempotency key per rendered form: a double tap or a retry sends it again."""
    return secrets.token_urlsafe(16)


HELD_WORDS = {
    "recipient_disabled": "recipient disabled",
    "scheduled": "scheduled for later",
    "removed": "left the room",
    "room_deleted": "room deleted",
    "cancelled": "cancelled by the sender",
    "superseded": "replaced by a newer message",
}


@register.filter
def held_reason(value: str | None) -> str:
    return HELD_WORDS.get(value or "", value or "")
