"""The operator edits accounts, owners, viewers, approved repositories and lobbies in the Django
admin, through the same actions as the admin API (audited; disabling ends sessions); the local
operator's session opens the admin without a Django user."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from console import local
from console.access import OPERATOR_COOKIE
from console.models import Account, ApprovedRepository, WebSession
from lobbies.actions import operator
from lobbies.models import AuditEvent, DeletedLobby, Lobby, Message


@pytest.fixture
def admin_browser(db) -> Client:
    user = get_user_model().objects.create_superuser("operator", "op@example.com", "pw-unused")
    client = Client(HTTP_HOST="127.0.0.1:8787", secure=True)
    client.force_login(user)
    return client


@pytest.mark.parametrize(
    "model", ["account", "lobbyowner", "dashboardviewer", "approvedrepository"]
)
def test_every_console_page_lists_and_offers_add(admin_browser, model):
    assert admin_browser.get(f"/admin/console/{model}/").status_code == 200
    assert admin_browser.get(f"/admin/console/{model}/add/").status_code == 200


def test_adding_an_account_in_the_admin_is_audited(admin_browser):
    answer = admin_browser.post(
        "/admin/console/account/add/",
        {"email": "ann@example.com", "enabled": "on", "may_create_lobbies": "on"},
    )
    assert answer.status_code == 302, answer.content[:2000]
    account = Account.objects.get()
    assert account.may_create_lobbies
    assert AuditEvent.objects.filter(action="account_created", target="ann@example.com").exists()


def test_disabling_in_the_admin_ends_the_accounts_sessions(admin_browser, make_account):
    account = make_account("ann@example.com")
    now = timezone.now()
    WebSession.objects.create(
        token_hash="a" * 64, place="account", account=account, created_at=now, expires_at=now
    )
    answer = admin_browser.post(
        f"/admin/console/account/{account.pk}/change/", {"may_create_lobbies": ""}
    )
    assert answer.status_code == 302
    assert not Account.objects.get().enabled and not WebSession.objects.exists()


def test_approving_a_repository_in_the_admin(admin_browser, lobby):
    answer = admin_browser.post(
        "/admin/console/approvedrepository/add/", {"lobby": lobby.pk, "repository": "acme/notes"}
    )
    assert answer.status_code == 302
    assert ApprovedRepository.objects.filter(lobby=lobby, repository="acme/notes").exists()
    assert AuditEvent.objects.filter(action="repository_approved").exists()


# ---------------------------------------------------------------- lobbies


def test_creating_a_lobby_in_the_admin_is_audited_as_the_admin_user(admin_browser):
    answer = admin_browser.post("/admin/lobbies/lobby/add/", {"name": "crew"})
    assert answer.status_code == 302
    assert Lobby.objects.filter(name="crew").exists()
    event = AuditEvent.objects.get(action="lobby_created", target="crew")
    assert event.account == "admin:operator"


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("admin", "reserved"),
        ("Bad Name", "not valid"),
        ("", "required"),
        ("old-team", "deleted lobby"),
        ("my-team", "already exists"),
    ],
)
def test_a_lobby_name_the_cli_refuses_is_refused_in_the_admin(admin_browser, lobby, name, says):
    operator.create_lobby("old-team")
    operator.delete_lobby("old-team")
    answer = admin_browser.post("/admin/lobbies/lobby/add/", {"name": name})
    assert answer.status_code == 200 and says in answer.content.decode()
    assert sorted(Lobby.objects.values_list("name", flat=True)) == ["my-team"]


def test_deleting_a_lobby_warns_that_its_name_is_retired(admin_browser, lobby, lead, backend):
    lead.send("backend", "m", "r-1")
    page = admin_browser.get(f"/admin/lobbies/lobby/{lobby.pk}/delete/").content.decode()
    assert "retired for good" in page and "2 agents, 1 messages" in page
    answer = admin_browser.post(f"/admin/lobbies/lobby/{lobby.pk}/delete/", {"post": "yes"})
    assert answer.status_code == 302
    assert not Lobby.objects.exists() and DeletedLobby.objects.filter(name="my-team").exists()
    event = AuditEvent.objects.get(action="lobby_deleted")
    assert event.account == "admin:operator" and event.detail == {"agents": 2, "messages": 1}


def test_the_lobby_list_counts_what_an_operator_checks_first(admin_browser, lobby, lead, backend):
    lead.send("backend", "one", "r-1")
    lead.send("backend", "two", "r-2", priority="important")
    lead.send("backend", "three", "r-3")
    backend.ok("acknowledge_messages", message_ids=[Message.objects.order_by("id").first().id])
    page = admin_browser.get("/admin/lobbies/lobby/")
    [row] = page.context["cl"].result_list
    counts = (row.agent_count, row.connected_count, row.pending_count, row.important_count)
    assert counts == (2, 0, 2, 1) and row.today_count == 3
    body = page.content.decode()
    # Paths on a local broker: the admin is open at 127.0.0.1 and at a public origin alike.
    for link in ("/my-team/", "/my-team/settings", "/my-team/activity"):
        assert f'href="{link}"' in body


def test_the_lobby_list_costs_the_same_queries_for_one_lobby_or_many(admin_browser, lobby):
    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert admin_browser.get("/admin/lobbies/lobby/").status_code == 200
        return len(captured)

    one = queries()
    for n in range(4):
        operator.create_lobby(f"team-{n}")
        operator.add_agent(f"team-{n}", "a")
    assert queries() == one


# ---------------------------------------------------------------- the local operator


def test_the_local_operator_reaches_the_admin_from_a_ticket_without_a_user(db, lobby):
    client = Client(HTTP_HOST="127.0.0.1:8787")
    assert client.get("/admin/").status_code == 302
    client.cookies[f"__Host-{OPERATOR_COOKIE}"] = local.redeem_ticket(local.issue_ticket()) or ""
    assert client.get("/admin/").status_code == 200
    assert client.get("/admin/lobbies/message/").status_code == 200
    answer = client.post("/admin/lobbies/lobby/add/", {"name": "crew"})
    assert answer.status_code == 302
    event = AuditEvent.objects.get(action="lobby_created", target="crew")
    assert event.account == "admin:local-operator"
    assert not get_user_model().objects.exists()


def test_the_local_operators_ticket_holds_the_admin_token_and_may_rotate(db, backend):
    """`pocolobby settings` read the admin token to make the ticket, so its session may mint
    a token in the admin (an email-code operator may not: test_admin_sign_in)."""
    client = Client(HTTP_HOST="127.0.0.1:8787")
    client.cookies[f"__Host-{OPERATOR_COOKIE}"] = local.redeem_ticket(local.issue_ticket()) or ""
    page = client.get("/admin/lobbies/agent/").content.decode()
    assert 'value="rotate"' in page
    download = client.post(
        "/admin/lobbies/agent/",
        {"action": "rotate", "_selected_action": [str(backend.agent.pk)], "post": "yes"},
    )
    assert download["Content-Disposition"].startswith("attachment;")
    assert json.loads(download.content)["token"].startswith("plt_")
    event = AuditEvent.objects.get(action="credential_rotated", agent_id="backend")
    assert event.account == "admin:local-operator"


def test_an_ended_operator_session_no_longer_opens_the_admin(db):
    client = Client(HTTP_HOST="127.0.0.1:8787")
    token = local.redeem_ticket(local.issue_ticket()) or ""
    client.cookies[f"__Host-{OPERATOR_COOKIE}"] = token
    local.end_operator_session(token)
    assert client.get("/admin/").status_code == 302


def test_admin_pages_carry_the_security_headers(admin_browser):
    response = admin_browser.get("/admin/lobbies/message/")
    assert "script-src" in response["Content-Security-Policy"]
    assert response["X-Frame-Options"] == "DENY"
    assert response["X-Content-Type-Options"] == "nosniff"


def test_logging_out_of_the_admin_ends_the_local_operators_session(db):
    client = Client(HTTP_HOST="127.0.0.1:8787")
    token = local.redeem_ticket(local.issue_ticket()) or ""
    client.cookies[f"__Host-{OPERATOR_COOKIE}"] = token
    assert client.post("/admin/logout/").status_code == 200
    assert not local.operator_session_valid(token)
    assert client.get("/admin/").status_code == 302


@pytest.mark.parametrize(
    "path",
    [
        "/admin/lobbies/lobby/?o=abc",
        "/admin/lobbies/lobby/99999/delete/",
        "/admin/lobbies/lobby/abc/change/",
        "/admin/lobbies/lobby/?q=%00",
        "/admin/lobbies/auditevent/?lobby_name=%00",
    ],
)
def test_odd_lobby_admin_requests_never_fail(admin_browser, lobby, path):
    assert admin_browser.get(path).status_code < 500
