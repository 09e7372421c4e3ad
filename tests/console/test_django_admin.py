"""The operator edits accounts, owners, viewers and approved repositories in the Django admin,
through the same actions as the admin API (audited; disabling ends sessions)."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.utils import timezone

from console.models import Account, ApprovedRepository, WebSession
from lobbies.models import AuditEvent


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
