"""Questions to the owner on the dashboard's pages (the rule is lobbies/question_selectors.py):
Waiting for you lists a question with an Answer box that names it, moves it to Answered when
the reply names it, says "You replied" under an agent's own request line, hides the words
from the public, and escapes them; the Messages page marks questions and answers them too."""

from __future__ import annotations

import json

import pytest
from django.test import Client
from django.utils import timezone

from board.models import BoardConfig, Visibility
from lobbies.models import Message
from tests.board.dashboard_helpers import LOCAL_HOST, operator_client
from tests.conftest import AgentClient

pytestmark = pytest.mark.django_db

HOSTILE = "<script>alert(1)</script>"


def _answer(client: Client, question: int, content: str, key: str) -> None:
    answer = client.post(
        "/my-team/reply",
        data=json.dumps(
            {"to": "backend", "content": content, "client_request_id": key, "reply_to": question}
        ),
        content_type="application/json",
        HTTP_ORIGIN=f"http://{LOCAL_HOST}",
    )
    assert answer.status_code == 200, answer.content


def test_a_question_waits_with_an_answer_box_then_shows_answered(backend: AgentClient) -> None:
    asked = backend.send("owner", f"Use SSO? {HOSTILE}", "q-1", kind="question")["message_id"]
    operator = operator_client()
    html = operator.get("/my-team/parts/waiting").content.decode()
    assert f'data-question="{asked}"' in html and "data-answered" not in html
    assert f'name="reply_to" value="{asked}" data-type="int"' in html
    assert "Answer <bdi>backend</bdi>" in html and "data-refresh-part" in html
    assert HOSTILE not in html and "&lt;script&gt;" in html

    # A reply that does not name it leaves it waiting; the one naming it answers it.
    operator.post(
        "/my-team/reply",
        data=json.dumps({"to": "backend", "content": "About lunch", "client_request_id": "p"}),
        content_type="application/json",
        HTTP_ORIGIN=f"http://{LOCAL_HOST}",
    )
    assert "data-answered" not in operator.get("/my-team/parts/waiting").content.decode()
    _answer(operator, asked, "Yes, SSO.", "a-1")
    html = operator.get("/my-team/parts/waiting").content.decode()
    assert f'data-question="{asked}" data-answered' in html
    assert "Yes, SSO." in html and "you replied" in html
    assert 'name="reply_to"' not in html  # nothing left to answer
    reply = Message.objects.get(sender_name="owner", reply_to=asked)
    assert reply.content == "Yes, SSO."


def test_the_agents_own_line_says_you_replied_and_stays_the_agents(backend: AgentClient) -> None:
    backend.ok("set_owner_requests", count=1, line="Approve the release?")
    operator = operator_client()
    assert "data-replied" not in operator.get("/my-team/parts/waiting").content.decode()
    operator.post(
        "/my-team/reply",
        data=json.dumps({"to": "backend", "content": "Approved.", "client_request_id": "r"}),
        content_type="application/json",
        HTTP_ORIGIN=f"http://{LOCAL_HOST}",
    )
    html = operator.get("/my-team/parts/waiting").content.decode()
    assert "Approve the release?" in html and "data-replied" in html and "You replied" in html
    backend.ok("set_owner_requests", count=1, line="And the hotfix?")  # asked again, later
    assert "data-replied" not in operator.get("/my-team/parts/waiting").content.decode()


def test_the_public_sees_that_a_question_waits_not_its_words(lobby, backend: AgentClient) -> None:
    asked = backend.send("owner", "the secret plan?", "q-1", kind="request")["message_id"]
    BoardConfig.objects.create(lobby=lobby, visibility=Visibility.PUBLIC, updated_at=timezone.now())
    html = Client(HTTP_HOST=LOCAL_HOST).get("/my-team/parts/waiting").content.decode()
    assert f'data-question="{asked}"' in html and "secret plan" not in html
    assert 'name="reply_to"' not in html  # the public may not answer


def test_the_messages_page_marks_questions_and_answers_them(backend: AgentClient) -> None:
    asked = backend.send("owner", "Friday?", "q-1", kind="question")["message_id"]
    told = backend.send("owner", "deployed", "n-1", kind="notice")["message_id"]
    operator = operator_client()
    html = operator.get("/my-team/parts/messages").content.decode()
    assert html.count("data-question-to-owner") == 1
    assert f'name="reply_to" value="{asked}"' in html
    assert f'name="reply_to" value="{told}"' not in html
    _answer(operator, asked, "No, Monday.", "a-1")
    html = operator.get("/my-team/parts/messages").content.decode()
    assert "data-question-to-owner" not in html and "data-answered" in html
    assert 'name="reply_to"' not in html


def test_waiting_for_you_lists_the_longest_waiting_and_counts_the_rest(
    backend: AgentClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    from board import selectors

    monkeypatch.setattr(selectors, "QUESTIONS_SHOWN", 2)
    asked = [
        backend.send("owner", f"q{n}?", f"q-{n}", kind="question")["message_id"] for n in range(3)
    ]
    html = operator_client().get("/my-team/parts/waiting").content.decode()
    assert [f'data-question="{m}"' in html for m in asked] == [True, True, False]
    assert 'data-more-questions="1"' in html and "1 more question waits" in html
