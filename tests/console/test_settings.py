"""Lobby settings: every route for the owner (hosted) and the local operator, audited, and
refused plainly for everyone else or for bad requests, with nothing changed."""

from __future__ import annotations

import re

import pytest
from django.utils import timezone

from board import actions as board_actions
from board.models import AgentAppearance, BoardConfig, NotesSource
from console.actions.handoff import open_handoff
from console.actions.lobby_settings import Actor
from console.models import ApprovedRepository, DashboardViewer, LobbyOwner
from console.web import digest
from lobbies.errors import BrokerError
from lobbies.models import (
    ActorKind,
    ArchivedRoom,
    AuditEvent,
    DeletedLobby,
    Lobby,
    Room,
    RoomMember,
)
from tests.console.conftest import browser_at, lobby_host, post_json
from tests.console.test_local_operator import operator_browser


@pytest.fixture
def owner_browser(hosted, lobby, lead, backend, make_account):
    """The owner of my-team, signed in on its host through a real hand-off."""
    owner = make_account("owner@example.com")
    LobbyOwner.objects.create(lobby=lobby, account=owner, created_at=timezone.now())
    return signed_in_on(lobby, "owner@example.com", make_account)


def signed_in_on(lobby: Lobby, email: str, make_account, settings: bool = True):
    account = make_account(email)
    client = browser_at(lobby_host(lobby.name))
    verifier = "v" * 43
    client.cookies["__Host-pocolobby-verifier"] = verifier
    token = open_handoff(account, lobby.name, digest(verifier), settings)
    assert client.get(f"/handoff?token={token}").status_code == 302
    return client


def audit(action: str) -> AuditEvent:
    return AuditEvent.objects.filter(action=action).latest("pk")


def ok(client, path: str, body: dict):
    answer = post_json(client, path, body)
    assert answer.status_code == 200, answer.content
    return answer


def test_the_owner_creates_a_room_and_sets_its_members(owner_browser, lobby):
    ok(owner_browser, "/settings/rooms/create", {"room": "design", "members": ["lead"]})
    room = Room.objects.get(lobby=lobby, room_id="design")
    event = audit("room_created")
    assert (event.actor_kind, event.account, event.target) == (
        "account",
        "owner@example.com",
        "design",
    )
    ok(owner_browser, "/settings/rooms/members", {"room": "design", "members": ["backend"]})
    assert list(RoomMember.objects.filter(room=room).values_list("agent__agent_id", flat=True)) == [
        "backend"
    ]
    assert audit("room_members_changed").detail == {"added": ["backend"], "removed": ["lead"]}


def test_members_must_be_admitted_agents(owner_browser, lobby):
    answer = post_json(owner_browser, "/settings/rooms/create", {"room": "x", "members": ["ghost"]})
    assert answer.status_code == 400 and "ghost" in answer.json()["error"]["message"]
    assert not Room.objects.filter(room_id="x").exists()


def test_archive_and_restore_are_audited_as_the_account(owner_browser, lobby):
    ok(owner_browser, "/settings/rooms/create", {"room": "design", "members": []})
    ok(owner_browser, "/settings/rooms/archive", {"room": "design"})
    assert ArchivedRoom.objects.filter(lobby=lobby, room_id="design").exists()
    assert audit("room_archived").account == "owner@example.com"
    ok(owner_browser, "/settings/rooms/restore", {"room": "design"})
    assert Room.objects.filter(lobby=lobby, room_id="design").exists()
    assert audit("room_restored").actor_kind == "account"


def test_visibility_viewers_appearance_and_summary(owner_browser, lobby):
    ok(owner_browser, "/settings/visibility", {"visibility": "public"})
    assert BoardConfig.objects.get(lobby=lobby).visibility == "public"
    ok(owner_browser, "/settings/viewers/add", {"email": " Bob@Example.com"})
    assert DashboardViewer.objects.filter(lobby=lobby, email="bob@example.com").exists()
    ok(owner_browser, "/settings/viewers/remove", {"email": "bob@example.com"})
    assert not DashboardViewer.objects.filter(lobby=lobby).exists()
    ok(
        owner_browser,
        "/settings/agents/appearance",
        {"agent": "lead", "emoji": "🦊", "display_name": "Lead", "hidden": True},
    )
    look = AgentAppearance.objects.get(agent__agent_id="lead")
    assert (look.emoji, look.display_name, look.hidden) == ("🦊", "Lead", True)
    ok(owner_browser, "/settings/summary", {"model": "claude-sonnet-5-5", "effort": "high"})
    config = BoardConfig.objects.get(lobby=lobby)
    assert (config.summary_model, config.summary_effort) == ("claude-sonnet-5-5", "high")
    actions = set(
        AuditEvent.objects.filter(account="owner@example.com").values_list("action", flat=True)
    )
    assert {
        "visibility_changed",
        "viewer_added",
        "viewer_removed",
        "agent_appearance_changed",
        "summary_settings_changed",
    } <= actions


def test_a_bad_summary_choice_is_refused(owner_browser, lobby):
    answer = post_json(owner_browser, "/settings/summary", {"model": "gpt", "effort": "high"})
    assert answer.status_code == 400 and "model is one of" in answer.json()["error"]["message"]
    assert not BoardConfig.objects.exists()


def test_notes_come_only_from_this_lobbys_approved_repositories(owner_browser, lobby):
    other = Lobby.objects.create(name="other", created_at=timezone.now())
    ApprovedRepository.objects.create(
        lobby=other, repository="acme/secret", created_at=timezone.now()
    )
    ApprovedRepository.objects.create(
        lobby=lobby, repository="acme/notes", created_at=timezone.now()
    )
    ok(owner_browser, "/settings/rooms/create", {"room": "design", "members": []})
    body = {"room": "design", "repository": "acme/secret", "ref": "main", "paths": ["NOTES.md"]}
    refused = post_json(owner_browser, "/settings/notes-source", body)
    assert refused.status_code == 403 and "not approved" in refused.json()["error"]["message"]
    assert not NotesSource.objects.exists()
    ok(owner_browser, "/settings/notes-source", {**body, "repository": "acme/notes"})
    source = NotesSource.objects.get()
    assert (source.paths, source.settings_version) == (["NOTES.md"], 1)
    ok(
        owner_browser,
        "/settings/notes-source",
        {**body, "repository": "acme/notes", "paths": ["a.md"]},
    )
    source.refresh_from_db()
    assert (source.paths, source.settings_version) == (["a.md"], 2)
    escape = {**body, "repository": "acme/notes", "paths": ["../etc/passwd"]}
    assert post_json(owner_browser, "/settings/notes-source", escape).status_code == 400


def test_the_operators_own_notes_source_approves_its_repository(owner_browser, lobby):
    ok(owner_browser, "/settings/rooms/create", {"room": "design", "members": []})
    board_actions.set_notes_source(
        Actor.operator(), lobby.pk, "design", "acme/plans", "main", ["PLAN.md"]
    )
    assert NotesSource.objects.get().repository == "acme/plans"
    assert ApprovedRepository.objects.filter(lobby=lobby, repository="acme/plans").exists()
    assert audit("repository_approved").target == "acme/plans"
    # Approved for the lobby, so its owner may now point a room at it too.
    ok(owner_browser, "/settings/rooms/create", {"room": "web", "members": []})
    body = {"room": "web", "repository": "acme/plans", "ref": "main", "paths": ["web.md"]}
    ok(owner_browser, "/settings/notes-source", body)
    with pytest.raises(BrokerError) as refused:
        board_actions.set_notes_source(Actor.operator(), lobby.pk, "web", "not a repo", "", ["a"])
    assert refused.value.code == "invalid_repository"
    assert ApprovedRepository.objects.filter(lobby=lobby).count() == 1


def test_deleting_takes_the_typed_name_and_is_audited_as_the_account(owner_browser, lobby):
    wrong = post_json(owner_browser, "/settings/delete", {"confirm": "my-tea"})
    assert wrong.status_code == 400 and Lobby.objects.filter(name="my-team").exists()
    ok(owner_browser, "/settings/delete", {"confirm": "my-team"})
    assert not Lobby.objects.filter(name="my-team").exists()
    assert DeletedLobby.objects.filter(name="my-team").exists()
    event = audit("lobby_deleted")
    assert (event.actor_kind, event.account) == ("account", "owner@example.com")


def test_the_page_warns_what_viewers_see_and_shows_no_token(owner_browser, lead, backend):
    page = owner_browser.get("/settings").content.decode()
    assert "Adding a viewer, or making the dashboard public, shares what the summaries" in page
    assert page.count("treat it like the notes themselves") == 1  # one privacy warning
    assert 'name="visibility" value="private"' in page and "Save visibility" in page
    assert lead.token not in page and backend.token not in page and "plt_" not in page


def test_agent_written_text_is_escaped(owner_browser, lobby):
    ok(
        owner_browser,
        "/settings/agents/appearance",
        {"agent": "lead", "emoji": "", "display_name": "<script>x()</script>", "hidden": False},
    )
    page = owner_browser.get("/settings").content.decode()
    assert "<script>x()</script>" not in page and "&lt;script&gt;" in page


def test_another_accounts_owner_cannot_touch_this_lobby(owner_browser, lobby, make_account):
    other = Lobby.objects.create(name="theirs", created_at=timezone.now())
    mallory = make_account("mallory@example.com")
    LobbyOwner.objects.create(lobby=other, account=mallory, created_at=timezone.now())
    theirs = signed_in_on(other, "mallory@example.com", make_account)
    # Mallory's cookie sent to my-team's host: that host knows no such session.
    stolen = browser_at(lobby_host("my-team"))
    stolen.cookies["__Host-pocolobby-lobby"] = theirs.cookies["__Host-pocolobby-lobby"].value
    answer = post_json(stolen, "/settings/visibility", {"visibility": "public"})
    assert answer.status_code == 403
    assert not BoardConfig.objects.filter(lobby=lobby).exists()


def test_an_owner_replaced_mid_session_changes_nothing(owner_browser, lobby, make_account):
    former = LobbyOwner.objects.get(lobby=lobby).account
    newcomer = make_account("new@example.com")
    LobbyOwner.objects.filter(lobby=lobby).update(account=newcomer)
    answer = post_json(owner_browser, "/settings/visibility", {"visibility": "public"})
    assert answer.status_code == 403
    # A request already past the page's check meets the action's own check in its transaction.
    with pytest.raises(BrokerError) as refused:
        board_actions.set_visibility(
            Actor(ActorKind.ACCOUNT, former.pk, former.email), lobby.pk, "public"
        )
    assert refused.value.code == "not_owner"
    assert not BoardConfig.objects.exists()


@pytest.mark.parametrize(
    ("body", "content_type", "status", "fragment"),
    [
        ('{"visibility": "public", "owner": "me"}', "application/json", 400, "not a field"),
        ("visibility=public", "application/x-www-form-urlencoded", 415, "application/json"),
        ("[public", "application/json", 400, "not valid JSON"),
        ('{"visibility": "public", "x": "' + "a" * 17000 + '"}', "application/json", 413, "larger"),
        ('{"visibility": 1}', "application/json", 400, "visibility"),
    ],
)
def test_bad_settings_bodies_are_refused(
    owner_browser, lobby, body, content_type, status, fragment
):
    answer = owner_browser.post(
        "/settings/visibility",
        data=body,
        content_type=content_type,
        HTTP_ORIGIN=f"https://{lobby_host('my-team')}",
    )
    assert answer.status_code == status
    assert fragment in answer.json()["error"]["message"]
    assert not BoardConfig.objects.exists()
    assert not AuditEvent.objects.filter(action="visibility_changed").exists()


def test_a_forged_origin_on_a_settings_post_is_refused(owner_browser, lobby):
    for origin in ("https://evil.example", "https://other.pocolobby.test", ""):
        answer = post_json(
            owner_browser, "/settings/visibility", {"visibility": "public"}, origin=origin
        )
        assert answer.status_code == 403
    assert not BoardConfig.objects.exists()


def test_a_signed_out_visitor_sees_the_sign_in_page_not_settings(hosted, lobby):
    page = browser_at(lobby_host("my-team")).get("/settings")
    assert page.status_code == 403 and b"/sign-in?next=settings" in page.content


def test_the_local_operator_changes_settings_audited_as_operator(settings, lobby, lead):
    client = operator_browser()
    page = client.get("/my-team/settings")
    assert page.status_code == 200 and b"Save visibility" in page.content
    ok(client, "/my-team/settings/rooms/create", {"room": "ops", "members": ["lead"]})
    event = audit("room_created")
    assert (event.actor_kind, event.account) == ("operator", "")


def test_the_page_says_only_whether_each_service_key_is_set(owner_browser, lobby, settings):
    settings.GITHUB_TOKEN = "ghp_secret-never-shown"
    settings.ANTHROPIC_API_KEY = ""
    html = owner_browser.get("/settings").content.decode()
    services = re.search(r'<details class="card fold" id="services">(.*?)</details>', html, re.S)
    assert services
    text = " ".join(services.group(1).split())
    assert "Notes from GitHub: <strong>set</strong>" in text
    assert 'Summaries by Claude: <span class="warning">not set</span>' in text
    assert "ANTHROPIC_API_KEY" in text
    assert "ghp_secret-never-shown" not in html


def test_a_lobby_of_many_rooms_lists_them_a_page_at_a_time(owner_browser, lobby):
    """Issue 39: 1,500 rooms made the settings page 2.9 MB (rooms made before the limit, or
    archived ones, which it does not count)."""
    now = timezone.now()
    Room.objects.bulk_create(
        Room(lobby=lobby, room_id=f"room-{n:04}", created_at=now) for n in range(1500)
    )
    ArchivedRoom.objects.bulk_create(
        ArchivedRoom(lobby=lobby, room_id=f"old-{n:04}", archived_at=now) for n in range(120)
    )
    first = owner_browser.get("/settings").content.decode()
    assert "1500 rooms" in first and "Rooms 1 to 50 of 1500" in first
    assert "<h3>room-0049</h3>" in first and "room-0050" not in first
    assert "Archived rooms 1 to 50 of 120" in first
    assert "old-0049" in first and "old-0050" not in first
    assert len(first) < 200_000, len(first)
    later = owner_browser.get("/settings?rooms=3").content.decode()
    assert "Rooms 101 to 150 of 1500" in later and "<h3>room-0100</h3>" in later
    assert "room-0099" not in later and "room-0150" not in later
    assert 'href="/settings?rooms=2#rooms">Previous rooms' in later
    assert 'href="/settings?rooms=4#rooms">Next rooms' in later
    assert '<details class="card fold" id="rooms" open>' in later
    last = owner_browser.get("/settings?archived=3").content.decode()
    assert "Archived rooms 101 to 120 of 120" in last and "old-0119" in last
