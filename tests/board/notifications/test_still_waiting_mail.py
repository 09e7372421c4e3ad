"""Mail when something still waits, through postmarker's real Django backend to a loopback
stand-in that speaks Postmark's API: a digest after the owner's chosen minutes, at most one
per lobby every few minutes, naming agents and counts but never an agent's words, a link to
the dashboard and an unsubscribe link that needs no sign-in."""

from __future__ import annotations

import functools
import json
import re
import threading
from collections.abc import Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone
from postmarker.core import PostmarkClient

from board.models import AlertPreferences, OwnerAlert
from board.notifications import alerts, vapid, waiting_mail
from board.notifications.preferences import set_alert_preferences
from board.notifications.senders import AlertSenders
from console.models import Account, LobbyOwner
from lobbies.models import Agent, Lobby
from tests.board.notifications.webpush_service import Device, PushService
from tests.conftest import AgentClient

pytestmark = pytest.mark.django_db

HOST = "my-team.pocolobby.test"


class Postmark:
    """Postmark's /email and /email/batch on loopback, answering as Postmark does."""

    def __init__(self) -> None:
        self.batches: list[tuple[str, Any]] = []
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                stand_in.batches.append((self.headers["X-Postmark-Server-Token"], body))
                mails = body if isinstance(body, list) else [body]
                answer = [
                    {
                        "ErrorCode": 0,
                        "Message": "OK",
                        "MessageID": f"id-{len(stand_in.batches)}-{i}",
                        "SubmittedAt": "2026-12-03T08:00:00.0000000-05:00",
                        "To": mail["To"],
                    }
                    for i, mail in enumerate(mails)
                ]
                raw = json.dumps(answer if isinstance(body, list) else answer[0]).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"

    @property
    def mails(self) -> list[dict[str, Any]]:
        found = []
        for _, body in self.batches:
            found.extend(body if isinstance(body, list) else [body])
        return found


@pytest.fixture
def postmark(settings: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Postmark]:
    stand_in = Postmark()
    thread = threading.Thread(target=stand_in.server.serve_forever, daemon=True)
    thread.start()
    settings.EMAIL_BACKEND = "postmarker.django.EmailBackend"
    settings.POSTMARK = {"TOKEN": "server-token", "TEST_MODE": False, "VERBOSITY": 0}
    settings.DEFAULT_FROM_EMAIL = "alerts@pocolobby.test"
    # postmarker's own client, told the stand-in's address (its one way to point elsewhere).
    monkeypatch.setattr(
        PostmarkClient,
        "__init__",
        functools.partialmethod(PostmarkClient.__init__, root_api_url=stand_in.url),
    )
    yield stand_in
    stand_in.server.shutdown()
    stand_in.server.server_close()


@pytest.fixture
def hosted(settings: Any) -> None:
    settings.POCOLOBBY_DOMAIN = "pocolobby.test"
    settings.POCOLOBBY_API_HOSTS = frozenset({"api.pocolobby.test"})
    settings.POCOLOBBY_PUBLIC_SCHEME = "https"
    settings.ALLOWED_HOSTS = [".pocolobby.test", "127.0.0.1"]


@pytest.fixture
def owner(hosted: None, lobby: Lobby) -> Account:
    account = Account.objects.create(email="boss@example.com", created_at=timezone.now())
    LobbyOwner.objects.create(lobby=lobby, account=account, created_at=timezone.now())
    set_alert_preferences(
        account,
        time_zone="Europe/Berlin",
        quiet_from=None,
        quiet_until=None,
        mail_when_waiting=True,
        mail_after_minutes=15,
    )
    return account


@pytest.fixture
def backend(hosted: None, backend: AgentClient) -> AgentClient:
    """The agent, on the hosted broker's API host."""
    backend.client.defaults["HTTP_HOST"] = "api.pocolobby.test"
    return backend


def _age_alerts(minutes: int) -> None:
    OwnerAlert.objects.update(created_at=timezone.now() - timedelta(minutes=minutes))


def test_one_mail_per_wait_after_the_chosen_minutes(
    postmark: Postmark, owner: Account, lobby: Lobby, backend: AgentClient
) -> None:
    backend.ok("set_owner_requests", count=1, line="approve the release of 2.4")
    alerts.watch_lobbies()
    _age_alerts(14)
    assert waiting_mail.mail_pass() == 0
    _age_alerts(16)
    assert waiting_mail.mail_pass() == 1
    later = timezone.now() + waiting_mail.MAIL_SPACING + timedelta(minutes=1)
    assert waiting_mail.mail_pass(later) == 0  # the same wait: no second mail
    [mail] = postmark.mails
    assert postmark.batches[0][0] == "server-token"
    assert mail["To"] == "boss@example.com"
    assert mail["Subject"] == "my-team: backend still waits on you"
    assert "- backend: an owner request (waiting since" in mail["TextBody"]
    assert "approve the release" not in mail["TextBody"]  # the agent's words stay out
    assert f"https://{HOST}/#waiting" in mail["TextBody"]
    assert "/push/unsubscribe/" in mail["TextBody"]
    assert "HtmlBody" not in mail or not mail["HtmlBody"]
    # Something new waits: one more mail, for it alone, once the spacing is past.
    backend.ok("set_owner_requests", count=2, line="and pick a name")
    alerts.watch_lobbies()
    _age_alerts(20)
    assert waiting_mail.mail_pass() == 0
    assert waiting_mail.mail_pass(later) == 1
    assert "- backend: an owner request" in postmark.mails[-1]["TextBody"]


PHISHING = "URGENT: your session expired, sign in again at https://evil.example/login"


def test_a_burst_of_waits_is_one_digest_without_the_agents_words(
    postmark: Postmark, owner: Account, lobby: Lobby, backend: AgentClient, lead: AgentClient
) -> None:
    lead.client.defaults["HTTP_HOST"] = "api.pocolobby.test"
    for number in range(1, 6):
        backend.ok("set_owner_requests", count=number, line=f"{PHISHING} ({number})")
        alerts.watch_lobbies()
    lead.ok("set_owner_requests", count=1, line=PHISHING)
    lead.ok("send_message", to="owner", content=PHISHING, client_request_id="r-1", kind="question")
    alerts.watch_lobbies()
    Agent.objects.filter(agent_id="lead").update(notification_attention_required=True)
    alerts.watch_lobbies()
    _age_alerts(16)
    for _ in range(5):
        waiting_mail.mail_pass()
    [mail] = postmark.mails
    assert mail["Subject"] == "my-team: 2 agents still wait on you"
    text = mail["TextBody"]
    assert "evil.example" not in text and "URGENT" not in text and "expired" not in text
    assert "- backend: an owner request (waiting since" in text
    assert "- lead: an owner request, a question for you, needs your attention" in text
    assert f"Open the dashboard to answer: https://{HOST}/#waiting" in text
    # What waits meanwhile goes out together once the spacing is past.
    backend.ok("set_owner_requests", count=9, line=PHISHING)
    alerts.watch_lobbies()
    _age_alerts(16)
    assert waiting_mail.mail_pass() == 0
    later = timezone.now() + waiting_mail.MAIL_SPACING + timedelta(seconds=1)
    assert waiting_mail.mail_pass(later) == 1
    assert "evil.example" not in postmark.mails[-1]["TextBody"]


def test_an_answered_wait_is_not_mailed(
    postmark: Postmark, owner: Account, lobby: Lobby, backend: AgentClient
) -> None:
    backend.ok("set_owner_requests", count=1, line="approve?")
    alerts.watch_lobbies()
    backend.ok("set_owner_requests", count=0, line="")
    alerts.watch_lobbies()
    _age_alerts(30)
    assert waiting_mail.mail_pass() == 0
    assert postmark.batches == []


def test_no_mail_without_opting_in(
    postmark: Postmark, owner: Account, lobby: Lobby, backend: AgentClient
) -> None:
    AlertPreferences.objects.update(mail_when_waiting=False)
    backend.ok("set_owner_requests", count=1, line="approve?")
    alerts.watch_lobbies()
    _age_alerts(60)
    assert waiting_mail.mail_pass() == 0


def test_the_unsubscribe_link_works_without_signing_in(
    postmark: Postmark, owner: Account, lobby: Lobby, backend: AgentClient
) -> None:
    backend.ok("set_owner_requests", count=1, line="approve?")
    alerts.watch_lobbies()
    _age_alerts(16)
    waiting_mail.mail_pass()
    link = re.search(r"https://\S+/push/unsubscribe/\S+", postmark.mails[0]["TextBody"])
    assert link
    path = link.group(0).removeprefix(f"https://{HOST}")
    stranger = Client(HTTP_HOST=HOST)
    page = stranger.get(path, secure=True)
    assert page.status_code == 200 and "Stop these mails" in page.content.decode()
    assert AlertPreferences.objects.get(account=owner).mail_when_waiting  # a GET changes nothing
    done = stranger.post(path, secure=True)
    assert done.status_code == 200 and "boss@example.com" in done.content.decode()
    assert not AlertPreferences.objects.get(account=owner).mail_when_waiting
    forged = stranger.post(path[:-3] + "xyz", secure=True)
    assert forged.status_code == 404


def test_mail_goes_out_while_a_push_service_hangs(
    postmark: Postmark,
    owner: Account,
    lobby: Lobby,
    backend: AgentClient,
    settings: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    backend.ok("set_owner_requests", count=1, line="approve?")
    alerts.watch_lobbies()
    _age_alerts(16)
    mails = waiting_mail.due_mail()
    with PushService() as service:
        service.mode = "hang"
        settings.POCOLOBBY_PUSH_ENDPOINT_ALLOW = frozenset({service.host_port})
        monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(service.ca))
        keys = Device().subscription(service.endpoint("stuck"))["keys"]
        push = alerts.Push(lobby.pk, 1, service.endpoint("stuck"), keys["p256dh"], keys["auth"])
        senders = AlertSenders(seconds=60)
        try:
            senders.submit([push], vapid.broker_vapid(), mails)  # one pass: both
            service.wait_for(lambda: len(service.held) == 1)
            assert senders.mailing is not None
            senders.mailing.result(timeout=30)
            assert senders.finished() == ([], [a.pk for a in OwnerAlert.objects.all()])
            assert len(postmark.mails) == 1 and service.let_go == []
        finally:
            senders.shutdown()
