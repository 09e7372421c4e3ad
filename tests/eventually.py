"""The one way a test waits for a fact: ask again until it holds, or fail saying what never did.

A test that waits asks the code for what it reports (a row, a log line, a held notice, a
screen), never for time passing: a fixed sleep proves nothing on a slow machine and wastes
time on a fast one. `eventually` serves plain tests and threads, `eventually_async` the
asyncio ones (its probe may be a coroutine function).
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")
TIMEOUT = 20.0
EVERY = 0.1

What = str | Callable[[], str]


def _failure(what: What, timeout: float, last: object) -> AssertionError:
    said = what() if callable(what) else what
    return AssertionError(f"{said} never held within {timeout:g} s (last seen: {last!r})")


def eventually(
    probe: Callable[[], T],
    *,
    timeout: float = TIMEOUT,
    every: float = EVERY,
    what: What = "the condition",
) -> T:
    """`probe()`'s first truthy answer, asked every `every` seconds; AssertionError naming
    `what` (a string, or a function that says it at the moment of failure, such as a screen)
    and the last answer when none came within `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise _failure(what, timeout, value)
        time.sleep(every)


async def eventually_async(
    probe: Callable[[], T | Awaitable[T]],
    *,
    timeout: float = TIMEOUT,
    every: float = EVERY,
    what: What = "the condition",
) -> T:
    """`eventually` for asyncio tests: the probe may answer directly or with an awaitable."""
    deadline = time.monotonic() + timeout
    while True:
        answer = probe()
        value: T = await answer if inspect.isawaitable(answer) else answer  # type: ignore[assignment]
        if value:
            return value
        if time.monotonic() >= deadline:
            raise _failure(what, timeout, value)
        await asyncio.sleep(every)
