"""The operator's console additions to /v1/admin: accounts, owners, approved repositories."""

from __future__ import annotations

import json

from django.test import Client
from django.utils import timezone

from console.models import Account, ApprovedRepository, Handoff, LobbyOwner, WebSession
from lobbies.models import AuditEvent

ADMIN = "Bearer pla_test-admin-token"


def call(method: str, path: str, body: dict | None = None, token: str = ADMIN):
    return getattr(Client(), method)(
        f"/v1/admin{path}",
        data=json.dumps(body or {}),
        content_type="application/json",
        HTTP_AUTHORIZATION=token,
    )


def test_accounts_are_created_changed_and_disabled(db):
    created = call("post", "/accounts", {"email": " Ann@Example.com ", "may_create_lobbies": True})
    assert created.status_code == 201
    assert created.json() == {
        "email": "ann@example.com",
        "enabled": True,
        "may_create_lobbies": True,
        "operator": False,
        "created": True,
    }
    changed = call("post", "/accounts", {"email": "ann@example.com", "enabled": False})
    assert changed.status_code == 200 and changed.json()["enabled"] is False
    assert Account.objects.get().may_create_lobbies is True
    assert AuditEvent.objects.filter(action="account_disabled", target="ann@example.com").exists()


def test_an_account_is_marked_and_unmarked_as_an_operator(db):
    marked = call("post", "/accounts", {"email": "op@example.com", "operator": True})
    assert marked.status_code == 201 and marked.json()["operator"] is True
    kept = call("post", "/accounts", {"email": "op@example.com", "may_create_lobbies": True})
    assert kept.json()["operator"] is True
    unmarked = call("post", "/accounts", {"email": "op@example.com", "operator": False})
    assert unmarked.json()["operator"] is False and not Account.objects.get().operator
    assert call("post", "/accounts", {"email": "a@example.com", "operator": "x"}).status_code == 400
    # Each change of the grant is audited once; a save that keeps it audits nothing.
    call("post", "/accounts", {"email": "op@example.com", "operator": False})
    audited = AuditEvent.objects.filter(action="account_operator_set", target="op@example.com")
    assert [e.detail["operator"] for e in audited.order_by("id")] == [True, False]


def test_disabling_deletes_sessions_and_hand_offs(lobby, make_account):
    account = make_account("ann@example.com")
    now = timezone.now()
    WebSession.objects.create(
        token_hash="a" * 64, place="account", account=account, created_at=now, expires_at=now
    )
    Handoff.objects.create(
        key_hash="b" * 64, account=account, lobby=lobby, created_at=now, expires_at=now
    )
    call("post", "/accounts", {"email": "ann@example.com", "enabled": False})
    assert not WebSession.objects.exists() and not Handoff.objects.exists()


def test_account_requests_are_checked(db):
    assert (
        call("post", "/accounts", {"email": "a@example.com"}, token="Bearer x").status_code == 401
    )
    assert call("post", "/accounts", {"email": "not-an-address"}).status_code == 400
    assert call("post", "/accounts", {"email": "a@example.com", "admin": True}).status_code == 400
    assert not Account.objects.exists()


def test_the_owner_is_set_and_replaced(lobby):
    assert call("put", "/lobbies/my-team/owner", {"email": "ann@example.com"}).status_code == 200
    assert call("put", "/lobbies/my-team/owner", {"email": "bo@example.com"}).json() == {
        "lobby": "my-team",
        "owner": "bo@example.com",
    }
    assert LobbyOwner.objects.get(lobby=lobby).account.email == "bo@example.com"
    assert call("put", "/lobbies/nope/owner", {"email": "a@example.com"}).status_code == 404


def test_repositories_are_approved_and_withdrawn_per_lobby(lobby):
    assert (
        call("post", "/lobbies/my-team/repositories", {"repository": "acme/notes"}).status_code
        == 201
    )
    assert ApprovedRepository.objects.filter(lobby=lobby, repository="acme/notes").exists()
    bad = call("post", "/lobbies/my-team/repositories", {"repository": "not a repo"})
    assert bad.status_code == 400
    assert (
        call("delete", "/lobbies/my-team/repositories", {"repository": "acme/notes"}).status_code
        == 200
    )
    assert not ApprovedRepository.objects.exists()
    gone = call("delete", "/lobbies/my-team/repositories", {"repository": "acme/notes"})
    assert gone.status_code == 404
