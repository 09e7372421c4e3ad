"""Fakes of GitHub and Anthropic for the dashboard's notes and summarizer tests: respx routes
answering in the services' real wire formats (tests/board/notes_fakes.py); each test reads the
Web Push key from its own store."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import respx

from board.notifications import vapid
from tests.board.notes_fakes import ANTHROPIC, GITHUB, FakeClaude, FakeGitHub


@pytest.fixture(autouse=True)
def _fresh_vapid_key() -> Iterator[None]:
    vapid.forget_cached_key()
    yield
    vapid.forget_cached_key()


@pytest.fixture
def router(settings: Any) -> Iterator[respx.MockRouter]:
    settings.GITHUB_TOKEN = "ghp_test-read-only"
    settings.GITHUB_API_URL = GITHUB
    settings.ANTHROPIC_API_KEY = "sk-ant-test-key"
    settings.ANTHROPIC_BASE_URL = ANTHROPIC
    with respx.mock(assert_all_called=False) as mock:
        yield mock


@pytest.fixture
def claude(router: respx.MockRouter) -> FakeClaude:
    return FakeClaude(router)


@pytest.fixture
def github(router: respx.MockRouter) -> FakeGitHub:
    return FakeGitHub(router)
