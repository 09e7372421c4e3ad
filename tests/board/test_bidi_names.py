"""Display names are bidi-isolated on every page that shows them (issue 39): a name with a
right-to-left override (U+202E) reorders only itself, never the sentence around it."""

from __future__ import annotations

import re
import uuid
from datetime import timedelta
from html.parser import HTMLParser

import pytest
from django.utils import timezone

from board.actions import SessionDay, store_token_days
from board.models import AgentAppearance
from lobbies.actions.runtime import RuntimeConflict, claim_runtime, wait_for_hand_over
from lobbies.models import Agent
from tests.board.dashboard_helpers import connect, operator_client
from tests.conftest import AgentClient

pytestmark = pytest.mark.django_db

OVERRIDE = "\u202e"
NAME = f"{OVERRIDE}Reviewer"
# Elements whose content is its own bidi unit: <bdi>, any element with a dir attribute, and
# text a browser shows on its own (form controls, the title).
ISOLATING = {"bdi", "option", "textarea", "title", "script", "style"}
VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "wbr"}
INSIDE_ISOLATES = re.compile("\u2068[^\u2068\u2069]*\u2069")


class _Isolation(HTMLParser):
    """Where an override would reach beyond itself: text outside any isolating element, or
    an attribute value (other than a form control's value) outside FSI ... PDI."""

    def __init__(self) -> None:
        super().__init__()
        self.open: list[tuple[str, bool]] = []
        self.seen = 0
        self.loose: list[str] = []

    def _isolated(self) -> bool:
        return any(isolating for _, isolating in self.open)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if value and OVERRIDE in value:
                self.seen += 1
                if name != "value" and OVERRIDE in INSIDE_ISOLATES.sub("", value):
                    self.loose.append(f"<{tag} {name}={value!r}>")
        if tag not in VOID:
            self.open.append((tag, tag in ISOLATING or any(n == "dir" for n, _ in attrs)))

    def handle_endtag(self, tag: str) -> None:
        while self.open:
            if self.open.pop()[0] == tag:
                break

    def handle_data(self, data: str) -> None:
        if OVERRIDE in data:
            self.seen += 1
            if not self._isolated():
                self.loose.append(data)


def isolation(html: str) -> _Isolation:
    checker = _Isolation()
    checker.feed(html)
    return checker


@pytest.fixture
def named(lead: AgentClient, backend: AgentClient) -> dict[str, AgentClient]:
    """Two agents whose display names carry an override, one waiting on the owner, one waited
    on by a new conversation, both reporting plan usage and tokens."""
    AgentAppearance.objects.create(agent=lead.agent, display_name=NAME, emoji=f"{OVERRIDE}x")
    AgentAppearance.objects.create(agent=backend.agent, display_name=f"{NAME}2")
    lead.ok("set_owner_requests", count=1, line="approve the release")
    claim_runtime(backend.agent, str(uuid.uuid4()), None)
    Agent.objects.filter(pk=backend.agent.pk).update(runtime_first_ready_at=timezone.now())
    connect(backend.agent)
    newcomer = str(uuid.uuid4())
    for _ in range(2):  # asked twice, a few seconds apart: a hand over waits
        with pytest.raises(RuntimeConflict) as refused:
            claim_runtime(backend.agent, newcomer, None)
        wait_for_hand_over(refused.value)
        Agent.objects.filter(pk=backend.agent.pk).update(
            waiting_since=timezone.now() - timedelta(seconds=6)
        )
    for agent in (lead, backend):
        now = timezone.now()
        reading = {
            "account_email": "team@example.com",
            "five_hour": {"used_percentage": 10, "resets_at": int(now.timestamp()) + 3600},
            "seven_day": {"used_percentage": 10, "resets_at": int(now.timestamp()) + 86400},
        }
        answer = agent.client.put(
            "/v1/usage",
            reading,
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {agent.token}",
        )
        assert answer.status_code == 200, answer.content
        store_token_days(agent.agent, [SessionDay("s-1", now.date(), 100, 50, 0, 0)], now)
    lead.send("backend", "hello", "m-1")
    return {"lead": lead, "backend": backend}


@pytest.mark.parametrize(
    ("page", "shows_names"),
    [
        ("/my-team/", 9),  # agents, waiting, hand over, accounts, reply boxes
        ("/my-team/tokens", 4),  # the charts and the table
        ("/my-team/settings", 3),  # the appearance form's fields
        ("/my-team/messages", 0),  # agent ids only
        ("/my-team/activity", 0),
    ],
)
def test_a_display_name_with_an_override_is_isolated_on_every_page(
    named: dict[str, AgentClient], page: str, shows_names: int
) -> None:
    html = operator_client().get(page).content.decode()
    checker = isolation(html)
    assert checker.loose == [], checker.loose
    assert checker.seen >= shows_names, (checker.seen, html)


def test_the_hand_over_confirmation_isolates_the_name_it_quotes(
    named: dict[str, AgentClient],
) -> None:
    html = operator_client().get("/my-team/parts/waiting").content.decode()
    assert f'data-confirm="Hand \u2068{NAME}2\u2069 over to the new conversation?' in html
    assert f"A new conversation is waiting to take over <bdi>{NAME}2</bdi></strong>" in html
    assert f"<strong><bdi>{NAME}</bdi></strong>" in html
    # The words in one span: a flex summary drew "Reply to<name>" with no space between.
    assert f"<summary><span>Reply to <bdi>{NAME}</bdi></span></summary>" in html


def test_the_checker_finds_a_name_outside_an_isolate() -> None:
    """The test above can fail: a bare name, or one in an attribute, is found."""
    assert isolation(f"<p>Hand <strong>{NAME}</strong> over</p>").loose
    assert isolation(f'<form data-confirm="Hand {NAME} over"></form>').loose
    assert not isolation(f"<p>Hand <bdi>{NAME}</bdi> over</p>").loose
    assert not isolation(f'<input dir="auto" value="{NAME}"><span dir="auto">{NAME}</span>').loose
