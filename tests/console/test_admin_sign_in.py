"""The Django admin on a hosted broker: operators sign in with the console's email code
(accounts marked operator), not a password; a `createsuperuser` password works only in
password recovery; a local broker keeps its ticket (and Django's form)."""

from __future__ import annotations

from urllib.parse import quote

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from console.actions.accounts import save_account
from console.models import WebSession
from lobbies.models import Agent, AuditEvent, Credential, Lobby
from tests.console.conftest import ACCOUNT_HOST, LOCAL_HOST, browser_at, post_json, sign_in

OPERATOR = "op@example.com"
RIGHT = "right-password"


@pytest.fixture
def operator_account(hosted, make_account):
    return make_account(OPERATOR, operator=True)


def signed_in(email: str, next_path: str = "") -> Client:
    browser = browser_at(ACCOUNT_HOST)
    answer = sign_in(browser, email, next_path)
    assert answer.status_code == 200, answer.content
    return browser


def test_an_operator_signs_in_with_an_emailed_code_and_reaches_the_admin(operator_account):
    browser = browser_at(ACCOUNT_HOST)
    asked = browser.get("/admin/")
    assert asked.status_code == 302 and asked["Location"] == "/admin/login/?next=/admin/"
    door = browser.get(asked["Location"])
    assert door.status_code == 302 and door["Location"] == "/sign-in?next=%2Fadmin%2F"
    page = browser.get(door["Location"])
    assert b'name="next" value="/admin/"' in page.content

    answer = sign_in(browser, OPERATOR, "/admin/")

    assert answer.json()["redirect"] == "/admin/"
    admin = browser.get("/admin/")
    assert admin.status_code == 200 and OPERATOR in admin.content.decode()
    created = browser.post("/admin/lobbies/lobby/add/", {"name": "crew"})
    assert created.status_code == 302 and Lobby.objects.filter(name="crew").exists()
    event = AuditEvent.objects.get(action="lobby_created", target="crew")
    assert event.account == f"admin:{OPERATOR}"
    assert not get_user_model().objects.exists()  # no second store of people


def test_an_operator_signed_in_by_email_code_may_rest_and_disable_but_never_mint_a_token(
    operator_account, backend
):
    """Credentials stay with the admin token: control of the operator's mailbox is not
    control of agents (the local operator's ticket rotates, tests/console/test_django_admin)."""
    browser = signed_in(OPERATOR, "/admin/")
    agents = "/admin/lobbies/agent/"
    page = browser.get(agents).content.decode()
    assert 'value="disable"' in page and 'value="rest"' in page
    assert 'value="rotate"' not in page
    tokens = set(Credential.objects.values_list("token_hash", "revoked_at"))
    chosen = {"_selected_action": [str(backend.agent.pk)], "post": "yes"}
    rotated = browser.post(agents, {"action": "rotate", **chosen})
    assert rotated.status_code == 302 and "Content-Disposition" not in rotated
    assert set(Credential.objects.values_list("token_hash", "revoked_at")) == tokens
    assert not AuditEvent.objects.filter(action="credential_rotated").exists()
    browser.post(agents, {"action": "rest", **chosen})
    browser.post(agents, {"action": "disable", **chosen})
    agent = Agent.objects.get(pk=backend.agent.pk)
    assert agent.resting and not agent.enabled


def test_sign_in_comes_back_to_the_admin_page_asked_for_and_only_to_the_admin(operator_account):
    browser = browser_at(ACCOUNT_HOST)
    door = browser.get("/admin/login/?next=/admin/lobbies/message/")
    assert door["Location"] == "/sign-in?next=" + quote("/admin/lobbies/message/", safe="")
    assert sign_in(browser, OPERATOR, "/admin/lobbies/message/").json()["redirect"] == (
        "/admin/lobbies/message/"
    )
    elsewhere = browser_at(ACCOUNT_HOST).get("/admin/login/?next=//evil.example/admin/")
    assert elsewhere["Location"] == "/sign-in?next=%2Fadmin%2F"
    assert browser.get("/admin/login/?next=https://evil.example/")["Location"] == "/admin/"
    assert browser.get("/admin/login/?next=/admin/login/")["Location"] == "/admin/"


def test_an_account_not_marked_operator_is_refused_with_a_clear_page(hosted, make_account):
    make_account("owner@example.com")
    browser = signed_in("owner@example.com", "/admin/")

    asked = browser.get("/admin/lobbies/message/")
    assert asked.status_code == 302
    refused = browser.get(asked["Location"])

    assert refused.status_code == 403
    page = refused.content.decode()
    assert "owner@example.com, which is not an operator account" in page
    assert "pocolobby account set owner@example.com --operator yes" in page
    assert browser.get("/admin/").status_code == 302
    assert browser.get("/").status_code == 200  # still signed in to the console


def test_unmarking_or_disabling_an_operator_closes_the_admin_at_its_next_request(
    operator_account,
):
    browser = signed_in(OPERATOR)
    assert browser.get("/admin/").status_code == 200
    save_account(OPERATOR, operator=False)
    assert browser.get("/admin/").status_code == 302
    save_account(OPERATOR, operator=True)
    assert browser.get("/admin/").status_code == 200
    save_account(OPERATOR, enabled=False)
    assert browser.get("/admin/").status_code == 302


def test_the_console_home_links_an_operator_to_the_admin(operator_account, make_account):
    assert b"data-admin-link" in signed_in(OPERATOR).get("/").content
    make_account("owner@example.com")
    assert b"data-admin-link" not in signed_in("owner@example.com").get("/").content


def test_the_admins_log_out_ends_the_operators_account_session(operator_account):
    browser = signed_in(OPERATOR)
    assert WebSession.objects.filter(account=operator_account).count() == 1
    out = browser.post("/admin/logout/")
    assert out.status_code == 200
    assert out.cookies["__Host-pocolobby-account"].value == ""
    assert not WebSession.objects.exists()
    assert browser.get("/admin/").status_code == 302


# ---------------------------------------------------------------- passwords: recovery only


@pytest.fixture
def superuser(db):
    return get_user_model().objects.create_superuser("rescue", "r@example.com", RIGHT)


def log_in(browser: Client, password: str = RIGHT):
    return browser.post(
        "/admin/login/", {"username": "rescue", "password": password, "next": "/admin/"}
    )


def test_the_password_form_is_refused_on_a_hosted_broker(hosted, superuser):
    browser = browser_at(ACCOUNT_HOST)
    refused = log_in(browser)
    assert refused.status_code == 403
    assert "does not take passwords" in refused.content.decode()
    assert "__Host-pocolobby-admin" not in refused.cookies
    assert browser.get("/admin/").status_code == 302


def test_a_password_session_from_before_is_not_honoured_on_a_hosted_broker(hosted, superuser):
    browser = browser_at(ACCOUNT_HOST)
    browser.force_login(superuser)
    assert browser.get("/admin/").status_code == 302


def test_password_recovery_opens_the_password_form(hosted, superuser, settings):
    """Its limits are sign-in's (tests/console/test_sign_in.py shows them)."""
    settings.POCOLOBBY_ADMIN_PASSWORD_RECOVERY = True
    browser = browser_at(ACCOUNT_HOST)
    assert b'name="password"' in browser.get("/admin/login/").content
    assert log_in(browser, "guess").status_code == 200
    assert log_in(browser).status_code == 302
    assert browser.get("/admin/").status_code == 200


def test_an_operator_account_still_signs_in_by_code_during_recovery(operator_account, settings):
    settings.POCOLOBBY_ADMIN_PASSWORD_RECOVERY = True
    browser = signed_in(OPERATOR)
    assert browser.get("/admin/").status_code == 200
    assert browser.get("/admin/login/")["Location"] == "/admin/"


# ---------------------------------------------------------------- a local broker: unchanged


def test_a_local_broker_keeps_the_password_form_and_has_no_email_sign_in(superuser, make_account):
    make_account(OPERATOR, operator=True)
    browser = browser_at(LOCAL_HOST)
    assert b'name="password"' in browser.get("/admin/login/").content
    assert log_in(browser).status_code == 302
    assert browser.get("/admin/").status_code == 200
    assert post_json(browser_at(LOCAL_HOST), "/sign-in", {"email": OPERATOR}).status_code == 404
