"""Small renderers for the dashboard: the 24-hour strip as SVG, ages and token counts.

The strip is built here, not in a template loop, because a page draws 96 cells per agent;
it holds only numbers and times we compute, never anything an agent wrote.
"""

from __future__ import annotations

import functools
import secrets
from datetime import UTC, datetime, timedelta
from typing import Any

from django import template
from django.utils.html import escape, format_html
from django.utils.safestring import SafeString

from board.strip import CELL, CELLS, Cell

register = template.Library()


@functools.lru_cache(maxsize=8)
def _quarter_labels(start: datetime) -> tuple[str, ...]:
    """ "HH:MM" of each quarter hour of a window: the same for every agent on a page."""
    return tuple((start + n * CELL).astimezone(UTC).strftime("%H:%M") for n in range(CELLS))


@register.simple_tag
def strip_svg(cells: list[Cell]) -> SafeString:
    """96 rects per agent, joined as plain strings: every value is an int or a time label we
    formatted, never text anyone wrote, so per-value escaping, a large share of a busy page's
    render (docs/PERFORMANCE.md, "Dashboard render"),
    buys nothing here."""
    if not cells:
        return SafeString("")
    labels = _quarter_labels(cells[0].starts_at - cells[0].index * CELL)
    rects = "".join(
        f'<rect x="{int(c.index)}" y="0" width="0.86" height="2" class="cell{int(c.level)}">'
        f"<title>{labels[c.index]} UTC: {_work_words(c.work_minutes)}, {int(c.count)} "
        f"message{'' if c.count == 1 else 's'}</title></rect>"
        for c in cells
    )
    # The quieter mark: a short bar along the bottom of a quarter hour with messages.
    marks = "".join(
        f'<rect x="{int(c.index) + 0.18:.2f}" y="1.62" width="0.5" height="0.3" class="msg"></rect>'
        for c in cells
        if c.count
    )
    total = int(sum(c.count for c in cells))
    minutes = int(sum(c.work_seconds for c in cells) // 60)
    # Hour ticks every 6 hours counted back from now, and the now marker at the right edge.
    ticks = "".join(
        f'<rect x="{x - 0.07:.2f}" y="1.7" width="0.14" height="0.3" class="tick"></rect>'
        for x in (24, 48, 72)
    )
    busiest = max(cells, key=lambda c: c.work_seconds)
    peak = (
        f"; busiest {labels[busiest.index]} UTC with {_work_words(busiest.work_minutes)}"
        if busiest.work_seconds
        else ""
    )
    return SafeString(
        '<svg class="strip" viewBox="0 0 96 2" preserveAspectRatio="none" role="img" '
        f'aria-label="Work in the last 24 hours by quarter hour: {minutes} min{peak}; '
        f'{total} message{"" if total == 1 else "s"}">'
        f'{rects}{marks}{ticks}<rect x="95.65" y="0" width="0.35" height="2" class="now"></rect>'
        "</svg>"
    )


def _work_words(minutes: int) -> str:
    return f"{minutes} min of work" if minutes else "no work"


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


@register.filter
def isolated(name: str) -> str:
    """A name inside an attribute (a confirm dialog's text), where `<bdi>` cannot go: wrapped
    in FIRST STRONG ISOLATE ... POP DIRECTIONAL ISOLATE, so a right-to-left override in it
    cannot reorder the sentence around it. Autoescaping still applies."""
    return f"\u2068{name}\u2069"


LOW_LEFT, VERY_LOW_LEFT = 20.0, 5.0  # percent left: amber at or below 20, red at or below 5


@register.filter
def left_level(left: float) -> str:
    if left <= VERY_LOW_LEFT:
        return "very-low"
    if left <= LOW_LEFT:
        return "low"
    return "fine"


@register.simple_tag
def usage_bar(left: float, what: str) -> SafeString:
    """What is left of a plan window as an SVG bar: numbers we computed, nothing agents wrote."""
    shown = max(0.0, min(100.0, float(left)))
    level = left_level(shown)
    return SafeString(
        f'<svg class="bar {level}" viewBox="0 0 100 4" preserveAspectRatio="none" role="img" '
        f'aria-label="{shown:.0f}% of the {escape(what)} left">'
        f'<rect class="track" width="100" height="4" rx="2"></rect>'
        f'<rect class="fill" width="{shown:.1f}" height="4" rx="2"></rect></svg>'
    )


@register.simple_tag
def token_bars(days: list[tuple[Any, int]], scale: int) -> SafeString:
    """One bar per day, heights against the lobby's busiest day, each with its number."""
    width = len(days) * 10
    bars = []
    for n, (day, total) in enumerate(days):
        height = 0.0 if scale <= 0 else 40 * total / scale
        label = f"{day:%b %d}: {tokens(total)} tokens"
        bars.append(
            f'<rect x="{n * 10 + 1}" y="{40 - height:.2f}" width="8" height="{height:.2f}" '
            f'class="bar{" empty" if not total else ""}"><title>{escape(label)}</title></rect>'
        )
    first, last = days[0][0], days[-1][0]
    total = sum(t for _, t in days)
    return SafeString(
        f'<svg class="token-bars" viewBox="0 0 {width} 41" preserveAspectRatio="none" role="img" '
        f'aria-label="Tokens per day from {first:%b %d} to {last:%b %d}: {tokens(total)} in all">'
        f'<rect x="0" y="40" width="{width}" height="1" class="axis"></rect>{"".join(bars)}</svg>'
    )


@register.simple_tag(takes_context=True)
def reply_box(
    context: template.Context, agent_id: str, name: str, where: str, reply_to: int | None = None
) -> SafeString:
    """The owner's folded reply box for one agent, built here rather than by an include: a
    page draws one per agent row, and an include per row was a large share of the agents part
    (docs/PERFORMANCE.md, "Figures from code comments").
    `agent_id` is a validated name; `name` (an owner-chosen display name) is escaped.
    With `reply_to` (a question's id) the box answers that question
    (lobbies/question_selectors.py); its live part refreshes once the reply is sent."""
    answers = (
        format_html(
            '<input type="hidden" name="reply_to" value="{}" data-type="int">', int(reply_to)
        )
        if reply_to is not None
        else ""
    )
    return format_html(
        # The words in one span: a flex summary would drop the space before the <bdi>.
        '<details class="reply" data-reply><summary><span>{verb} <bdi>{name}</bdi></span>'
        "</summary>"
        '<form data-json data-reply-form{refresh} action="{base}/reply">'
        '<input type="hidden" name="to" value="{agent}">{answers}'
        '<input type="hidden" name="client_request_id" value="{key}" data-form-key>'
        '<label for="reply-{where}-{agent}">Message to <bdi>{name}</bdi>, as the owner</label>'
        '<textarea id="reply-{where}-{agent}" name="content" rows="3" required></textarea>'
        '<div class="row reply-actions"><label class="choice">'
        '<input type="checkbox" name="important"> Important</label>'
        '<button type="submit">Send</button></div>'
        '<p data-form-status role="status"></p></form></details>',
        verb="Answer" if reply_to is not None else "Reply to",
        refresh=SafeString(" data-refresh-part") if reply_to is not None else "",
        answers=answers,
        name=name,
        base=context.get("base", ""),
        agent=agent_id,
        key=form_key(),
        where=where if reply_to is None else f"{where}-{int(reply_to)}",
    )
