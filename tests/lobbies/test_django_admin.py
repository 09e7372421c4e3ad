"""The operator browses the store in the Django admin: read-only, and never a token."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client


@pytest.fixture
def operator_browser(db) -> Client:
    user = get_user_model().objects.create_superuser("operator", "op@example.com", "pw-unused")
    client = Client(HTTP_HOST="127.0.0.1:8787", secure=True)
    client.force_login(user)
    return client


@pytest.mark.parametrize("store_page", ["lobby", "agent", "message", "delivery", "auditevent"])
def test_every_store_page_lists_without_tokens(operator_browser, lead, backend, store_page):
    lead.send("backend", "Review <b>this</b>", "r-1")
    response = operator_browser.get(f"/admin/lobbies/{store_page}/")
    assert response.status_code == 200
    body = response.content.decode()
    assert lead.token not in body and backend.token not in body


def test_a_message_page_shows_its_deliveries_read_only_and_escaped(operator_browser, lead, backend):
    sent = lead.send("backend", "Review <script>alert(1)</script>", "r-1")
    response = operator_browser.get(f"/admin/lobbies/message/{sent['message_id']}/change/")
    body = response.content.decode()
    assert response.status_code == 200
    assert "<script>alert(1)</script>" not in body and "&lt;script&gt;" in body
    assert "backend" in body and 'name="_save"' not in body


def test_nothing_accepted_can_be_added_or_deleted_in_the_admin(operator_browser, lead, backend):
    sent = lead.send("backend", "m", "r-1")
    assert operator_browser.get("/admin/lobbies/message/add/").status_code == 403
    delete = operator_browser.post(
        f"/admin/lobbies/message/{sent['message_id']}/delete/", {"post": "yes"}
    )
    assert delete.status_code == 403


def test_the_admin_needs_a_signed_in_staff_user(db):
    response = Client(HTTP_HOST="127.0.0.1:8787").get("/admin/lobbies/message/")
    assert response.status_code == 302 and "/admin/login/" in response["Location"]
