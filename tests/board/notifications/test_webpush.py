"""Web Push to the owner's devices, on the wire: a loopback push service stand-in receives
each push, the test decrypts it with the device's private key (aes128gcm) and verifies the
VAPID JWT against the broker's public key; coalescing, quiet hours, 404/410 clean-up and the
endpoint rules (private and loopback refused unless allowed)."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from datetime import datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from django.db import connection
from django.test import Client
from django.utils import timezone

from board.models import AlertReason, BoardConfig, OwnerAlert, PushSubscription, VapidKey
from board.notifications import alerts, vapid
from board.notifications.preferences import MAX_DEVICES, set_alert_preferences
from board.notifications.webpush_endpoints import EndpointRefused, check_endpoint
from lobbies.models import Agent, Lobby
from tests.board.dashboard_helpers import LOCAL_HOST, operator_client
from tests.board.notifications.webpush_service import (
    Device,
    PushService,
    trusted_service,
    verify_vapid,
)
from tests.conftest import AgentClient

pytestmark = pytest.mark.django_db

ORIGIN = f"http://{LOCAL_HOST}"


@pytest.fixture
def service(settings: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[PushService]:
    with trusted_service(settings, monkeypatch) as running:
        yield running


def _send(client: Client, method: str, path: str, body: Any, origin: str = ORIGIN) -> Any:
    return client.generic(
        method,
        path,
        data=json.dumps(body),
        content_type="application/json",
        HTTP_ORIGIN=origin,
    )


def _subscribe(service: PushService, name: str = "phone") -> Device:
    device = Device()
    answer = _send(
        operator_client(),
        "POST",
        "/my-team/push/subscriptions",
        device.subscription(service.endpoint(name)),
    )
    assert answer.status_code == 201, answer.content
    return device


def _payloads(service: PushService, device: Device) -> list[dict[str, Any]]:
    return [device.decrypt(r.body) for r in service.received]


def test_a_push_arrives_encrypted_for_the_device_and_signed_by_the_broker(
    service: PushService, lobby: Lobby, backend: AgentClient
) -> None:
    device = _subscribe(service)
    backend.ok("set_owner_requests", count=1, line="approve the release of 2.4")
    assert alerts.push_pass() == {"sent": 1, "dropped": 0, "failed": 0, "refused": 0}
    [push] = service.received
    assert push.path == "/push/phone"
    assert push.headers["content-encoding"] == "aes128gcm"
    assert int(push.headers["ttl"]) > 0
    claims = verify_vapid(push.headers["authorization"], vapid.public_key(), service.origin)
    assert claims["sub"].startswith("mailto:")
    payload = device.decrypt(push.body)
    assert payload["title"] == "my-team: backend waits on you"
    assert payload["body"] == "approve the release of 2.4"
    assert (payload["lobby"], payload["agent"], payload["reason"]) == (
        "my-team",
        "backend",
        "owner_request",
    )
    assert payload["place"] == "#waiting"


def test_the_same_request_again_does_not_push_and_a_change_does(
    service: PushService, lobby: Lobby, backend: AgentClient
) -> None:
    device = _subscribe(service)
    backend.ok("set_owner_requests", count=1, line="pick a database")
    start = timezone.now()
    alerts.push_pass(start)
    backend.ok("set_owner_requests", count=1, line="pick a database")
    assert alerts.push_pass(start + timedelta(minutes=5))["sent"] == 0
    backend.ok("set_owner_requests", count=2, line="pick a database; name the service")
    assert alerts.push_pass(start + timedelta(minutes=6))["sent"] == 1
    assert [p["body"] for p in _payloads(service, device)] == [
        "pick a database",
        "pick a database; name the service",
    ]


def test_pushes_for_one_agent_are_coalesced_to_one_a_minute(
    service: PushService, lobby: Lobby, backend: AgentClient, lead: AgentClient
) -> None:
    device = _subscribe(service)
    start = timezone.now()
    backend.ok("set_owner_requests", count=1, line="first")
    alerts.push_pass(start)
    backend.ok("set_owner_requests", count=1, line="second")
    alerts.push_pass(start + timedelta(seconds=10))
    backend.ok("set_owner_requests", count=1, line="third")
    lead.ok("set_owner_requests", count=1, line="the lead's own question")
    alerts.push_pass(start + timedelta(seconds=20))
    # backend waits for its minute; the lead, not pushed before, goes out at once.
    assert [(p["agent"], p["body"]) for p in _payloads(service, device)] == [
        ("backend", "first"),
        ("lead", "the lead's own question"),
    ]
    alerts.push_pass(start + timedelta(seconds=61))
    last = _payloads(service, device)[-1]
    assert (last["agent"], last["body"]) == ("backend", "third")
    assert len(service.received) == 3
    assert not OwnerAlert.objects.filter(pushed_at__isnull=True).exists()


def test_an_answered_request_is_not_pushed_after_its_minute(
    service: PushService, lobby: Lobby, backend: AgentClient
) -> None:
    _subscribe(service)
    start = timezone.now()
    backend.ok("set_owner_requests", count=1, line="first")
    alerts.push_pass(start)
    backend.ok("set_owner_requests", count=1, line="second")
    alerts.push_pass(start + timedelta(seconds=5))
    backend.ok("set_owner_requests", count=0, line="")
    alerts.push_pass(start + timedelta(seconds=70))
    assert len(service.received) == 1


def test_no_push_in_the_persons_quiet_hours_in_their_own_time_zone(
    service: PushService, lobby: Lobby, backend: AgentClient
) -> None:
    _subscribe(service)
    now = timezone.now()
    tokyo = now.astimezone(ZoneInfo("Asia/Tokyo"))
    set_alert_preferences(
        None,
        time_zone="Asia/Tokyo",
        quiet_from=(tokyo - timedelta(hours=1)).time().replace(second=0, microsecond=0),
        quiet_until=(tokyo + timedelta(hours=1)).time().replace(second=0, microsecond=0),
        mail_when_waiting=False,
        mail_after_minutes=15,
    )
    backend.ok("set_owner_requests", count=1, line="deploy at night?")
    assert alerts.push_pass(now)["sent"] == 0
    assert service.received == []
    # The same hours read in UTC would not be quiet now: the zone is the person's.
    set_alert_preferences(
        None,
        time_zone="Asia/Tokyo",
        quiet_from=None,
        quiet_until=None,
        mail_when_waiting=False,
        mail_after_minutes=15,
    )
    backend.ok("set_owner_requests", count=1, line="deploy now?")
    assert alerts.push_pass(now + timedelta(minutes=2))["sent"] == 1


@pytest.mark.parametrize(
    ("start", "end", "clock", "quiet"),
    [
        (time(22, 0), time(7, 0), time(23, 30), True),
        (time(22, 0), time(7, 0), time(6, 59), True),
        (time(22, 0), time(7, 0), time(7, 0), False),
        (time(22, 0), time(7, 0), time(12, 0), False),
        (time(13, 0), time(14, 0), time(13, 30), True),
        (time(13, 0), time(14, 0), time(14, 30), False),
    ],
)
def test_quiet_hours_may_run_past_midnight(
    start: time, end: time, clock: time, quiet: bool
) -> None:
    from board.models import AlertPreferences

    preferences = AlertPreferences(time_zone="Europe/Berlin", quiet_from=start, quiet_until=end)
    local = datetime(2026, 1, 15, clock.hour, clock.minute, tzinfo=ZoneInfo("Europe/Berlin"))
    assert alerts.in_quiet_hours(preferences, local.astimezone(ZoneInfo("UTC"))) is quiet


@pytest.mark.parametrize("status", [404, 410])
def test_a_subscription_the_service_says_is_gone_is_dropped(
    service: PushService, lobby: Lobby, backend: AgentClient, status: int
) -> None:
    _subscribe(service)
    service.status = status
    backend.ok("set_owner_requests", count=1, line="anyone there?")
    assert alerts.push_pass()["dropped"] == 1
    assert not PushSubscription.objects.exists()


def test_a_failing_service_keeps_the_subscription(
    service: PushService, lobby: Lobby, backend: AgentClient
) -> None:
    _subscribe(service)
    service.status = 500
    backend.ok("set_owner_requests", count=1, line="anyone there?")
    assert alerts.push_pass()["failed"] == 1
    assert PushSubscription.objects.count() == 1


def test_an_agent_that_needs_attention_pushes_once(
    service: PushService, lobby: Lobby, backend: AgentClient
) -> None:
    device = _subscribe(service)
    Agent.objects.filter(agent_id="backend").update(notification_attention_required=True)
    alerts.push_pass()
    alerts.push_pass(timezone.now() + timedelta(minutes=3))
    [payload] = _payloads(service, device)
    assert payload["reason"] == "attention" and payload["place"] == "#agents"
    assert "needs your attention" in payload["body"]


def test_a_conversation_waiting_for_a_hand_over_pushes_once_and_settles_when_gone(
    service: PushService, lobby: Lobby, backend: AgentClient
) -> None:
    """A refused conversation that asked again (a real wait, not a health check's one ask)
    pushes; when the wait ends (handed over, or it stopped asking) the alert is settled."""
    device = _subscribe(service)
    now = timezone.now()
    waiting = Agent.objects.filter(agent_id="backend")
    waiting.update(waiting_runtime_id="r-new", waiting_since=now, waiting_seen_at=now)
    alerts.push_pass(now)
    assert _payloads(service, device) == []  # one ask is not a wait
    waiting.update(waiting_seen_at=now + timedelta(seconds=3))
    alerts.push_pass(now + timedelta(seconds=4))
    [payload] = _payloads(service, device)
    assert (payload["agent"], payload["reason"]) == ("backend", "handover")
    assert "waiting to take over" in payload["body"]
    alerts.push_pass(now + timedelta(seconds=5))
    assert len(_payloads(service, device)) == 1
    waiting.update(waiting_runtime_id=None, waiting_since=None, waiting_seen_at=None)
    alerts.push_pass(now + timedelta(seconds=6))
    assert OwnerAlert.objects.get(reason=AlertReason.HANDOVER).settled_at is not None


# --- the routes ------------------------------------------------------------------------


def test_the_public_key_is_the_brokers_and_made_once_in_a_private_file(
    lobby: Lobby, settings: Any
) -> None:
    answer = operator_client().get("/my-team/push/key")
    assert answer.status_code == 200
    key = answer.json()["public_key"]
    assert key == vapid.public_key() and len(key) == 87  # 65 bytes, base64url
    path = settings.DATA_DIR / vapid.KEY_FILE
    if connection.vendor == "sqlite":
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    else:  # PostgreSQL: a row every serve process shares, no file
        assert VapidKey.objects.count() == 1 and not path.exists()
    vapid.forget_cached_key()
    assert vapid.public_key() == key
    assert "PRIVATE" not in answer.content.decode()


def test_a_subscription_is_stored_and_removed_by_its_endpoint(
    service: PushService, lobby: Lobby
) -> None:
    device = _subscribe(service)
    row = PushSubscription.objects.get()
    assert (row.endpoint, row.p256dh, row.account) == (
        service.endpoint("phone"),
        device.p256dh,
        None,
    )
    gone = _send(
        operator_client(), "DELETE", "/my-team/push/subscriptions", {"endpoint": row.endpoint}
    )
    assert gone.status_code == 200 and gone.json()["removed"] == 1
    assert not PushSubscription.objects.exists()


def test_a_subscription_from_another_origin_is_refused(service: PushService, lobby: Lobby) -> None:
    body = Device().subscription(service.endpoint("phone"))
    answer = _send(
        operator_client(), "POST", "/my-team/push/subscriptions", body, "https://evil.test"
    )
    assert answer.status_code == 403 and answer.json()["error"]["code"] == "bad_origin"
    assert not PushSubscription.objects.exists()


@pytest.mark.parametrize(
    ("endpoint", "words"),
    [
        ("http://push.example.com/x", "must be an https URL"),
        ("https://127.0.0.1/x", "private, loopback or link-local"),
        ("https://localhost:8443/x", "private, loopback or link-local"),
        ("https://10.1.2.3/x", "private, loopback or link-local"),
        ("https://192.168.0.10/x", "private, loopback or link-local"),
        ("https://169.254.169.254/latest", "private, loopback or link-local"),
        ("https://[::1]/x", "private, loopback or link-local"),
        ("https://[fe80::1]/x", "private, loopback or link-local"),
        ("https://[::ffff:127.0.0.1]/x", "private, loopback or link-local"),
        # An IPv6 address that carries an IPv4 one is judged by the IPv4 one it reaches.
        ("https://[64:ff9b::7f00:1]/x", "private, loopback or link-local"),  # NAT64
        ("https://[64:ff9b:1::a00:1]/x", "private, loopback or link-local"),  # local NAT64
        ("https://[::127.0.0.1]/x", "private, loopback or link-local"),  # IPv4-compatible
        ("https://[::10.0.0.1]/x", "private, loopback or link-local"),
        ("https://[2002:7f00:1::]/x", "private, loopback or link-local"),  # 6to4
        ("https://[2002:c0a8:1::1]/x", "private, loopback or link-local"),
        # Teredo: relay 65.54.227.120, client 127.0.0.1 (stored inverted)
        ("https://[2001:0:4136:e378:8000:63bf:80ff:fffe]/x", "private, loopback or link-local"),
        ("https://user:pw@push.example.com/x", "carry no credentials"),
        ("https:///x", "must name a host"),
    ],
)
def test_endpoints_off_the_public_internet_are_refused(
    lobby: Lobby, endpoint: str, words: str
) -> None:
    with pytest.raises(EndpointRefused, match=words):
        check_endpoint(endpoint)
    answer = _send(
        operator_client(), "POST", "/my-team/push/subscriptions", Device().subscription(endpoint)
    )
    assert answer.status_code == 400 and words in answer.json()["error"]["message"]
    assert not PushSubscription.objects.exists()


@pytest.mark.parametrize(
    "endpoint",
    [
        "https://[64:ff9b::808:808]/x",  # NAT64 to 8.8.8.8
        "https://[2002:808:808::1]/x",  # 6to4 from 8.8.8.8
        "https://[2606:4700:4700::1111]/x",
    ],
)
def test_an_address_that_carries_a_public_ipv4_one_is_admitted(endpoint: str) -> None:
    assert check_endpoint(endpoint).url == endpoint


def test_the_allow_list_admits_a_named_private_endpoint_but_still_wants_https(
    settings: Any,
) -> None:
    settings.POCOLOBBY_PUSH_ENDPOINT_ALLOW = frozenset({"127.0.0.1:9443"})
    assert check_endpoint("https://127.0.0.1:9443/x").addresses == ("127.0.0.1",)
    with pytest.raises(EndpointRefused):
        check_endpoint("https://127.0.0.1:9444/x")
    with pytest.raises(EndpointRefused, match="https"):
        check_endpoint("http://127.0.0.1:9443/x")


def test_bad_keys_are_refused_and_nothing_is_stored(service: PushService, lobby: Lobby) -> None:
    body = Device().subscription(service.endpoint("phone"))
    body["keys"]["p256dh"] = "AAAA"
    answer = _send(operator_client(), "POST", "/my-team/push/subscriptions", body)
    assert answer.status_code == 400 and "p256dh" in answer.json()["error"]["message"]
    body = Device().subscription(service.endpoint("phone"))
    body["extra"] = 1
    answer = _send(operator_client(), "POST", "/my-team/push/subscriptions", body)
    assert answer.status_code == 400
    assert not PushSubscription.objects.exists()


def test_the_service_worker_is_served_for_the_lobbys_scope(lobby: Lobby) -> None:
    answer = Client(HTTP_HOST=LOCAL_HOST).get("/my-team/push/service-worker.js")
    assert answer.status_code == 200
    assert answer["Content-Type"].startswith("text/javascript")
    assert answer["Service-Worker-Allowed"] == "/my-team/"
    assert "showNotification" in answer.content.decode()


def test_the_dashboard_offers_notifications_to_the_operator(lobby: Lobby) -> None:
    page = operator_client().get("/my-team/").content.decode()
    assert 'id="notifications"' in page and "data-push-on" in page


# --- hosted: who may have the pushes ----------------------------------------------------

HOST = "my-team.pocolobby.test"


@pytest.fixture
def hosted(settings: Any) -> None:
    settings.POCOLOBBY_DOMAIN = "pocolobby.test"
    settings.POCOLOBBY_API_HOSTS = frozenset({"api.pocolobby.test"})
    settings.POCOLOBBY_PUBLIC_SCHEME = "https"
    settings.ALLOWED_HOSTS = [".pocolobby.test", "127.0.0.1"]


def _browser(email: str, lobby: Lobby, role: str) -> Client:
    from console.access import LOBBY_COOKIE
    from console.models import Account, DashboardViewer, LobbyOwner, WebSession

    account = Account.objects.create(email=email, created_at=timezone.now())
    if role == "owner":
        LobbyOwner.objects.create(lobby=lobby, account=account, created_at=timezone.now())
    else:
        DashboardViewer.objects.create(lobby=lobby, email=email, created_at=timezone.now())
    client = Client(HTTP_HOST=HOST, secure=True)
    token = WebSession.open(account, lobby, timezone.now(), timedelta(hours=1))
    client.cookies[f"__Host-{LOBBY_COOKIE}"] = token
    return client


def _hosted_subscribe(client: Client, endpoint: str) -> Any:
    return _send(
        client, "POST", "/push/subscriptions", Device().subscription(endpoint), f"https://{HOST}"
    )


def test_the_owner_subscribes_and_a_viewer_only_when_the_owner_allows(
    hosted: None, service: PushService, lobby: Lobby, backend: AgentClient
) -> None:
    owner = _browser("boss@example.com", lobby, "owner")
    viewer = _browser("viewer@example.com", lobby, "viewer")
    assert _hosted_subscribe(owner, service.endpoint("boss")).status_code == 201
    refused = _hosted_subscribe(viewer, service.endpoint("viewer"))
    assert refused.status_code == 403
    assert "data-push-on" not in viewer.get("/").content.decode()
    allowed = _send(
        owner,
        "POST",
        "/settings/viewer-notifications",
        {"viewers_get_notifications": True},
        f"https://{HOST}",
    )
    assert allowed.status_code == 200, allowed.content
    assert _hosted_subscribe(viewer, service.endpoint("viewer")).status_code == 201
    backend.client.defaults["HTTP_HOST"] = "api.pocolobby.test"
    backend.ok("set_owner_requests", count=1, line="approve?")
    assert alerts.push_pass()["sent"] == 2
    assert sorted(r.path for r in service.received) == ["/push/boss", "/push/viewer"]
    # The owner takes it back: the viewer's device gets nothing more.
    _send(
        owner,
        "POST",
        "/settings/viewer-notifications",
        {"viewers_get_notifications": False},
        f"https://{HOST}",
    )
    backend.ok("set_owner_requests", count=1, line="approve now?")
    assert alerts.push_pass(timezone.now() + timedelta(minutes=2))["sent"] == 1
    assert service.received[-1].path == "/push/boss"


def test_the_public_and_a_viewer_cannot_remove_the_owners_device(
    hosted: None, service: PushService, lobby: Lobby
) -> None:
    owner = _browser("boss@example.com", lobby, "owner")
    viewer = _browser("viewer@example.com", lobby, "viewer")
    _hosted_subscribe(owner, service.endpoint("boss"))
    endpoint = {"endpoint": service.endpoint("boss")}
    answer = _send(viewer, "DELETE", "/push/subscriptions", endpoint, f"https://{HOST}")
    assert answer.status_code == 200 and answer.json()["removed"] == 0
    public = Client(HTTP_HOST=HOST, secure=True)
    answer = _send(public, "DELETE", "/push/subscriptions", endpoint, f"https://{HOST}")
    assert answer.status_code == 403
    assert PushSubscription.objects.count() == 1


def test_a_persons_eleventh_device_replaces_their_oldest(
    service: PushService, lobby: Lobby
) -> None:
    for number in range(MAX_DEVICES + 1):
        _subscribe(service, f"device-{number}")
    kept = sorted(PushSubscription.objects.values_list("endpoint", flat=True))
    assert len(kept) == MAX_DEVICES
    assert service.endpoint("device-0") not in kept
    assert service.endpoint(f"device-{MAX_DEVICES}") in kept
    # The same device again refreshes its row: nothing more is replaced.
    _subscribe(service, "device-5")
    assert PushSubscription.objects.count() == MAX_DEVICES
    assert PushSubscription.objects.filter(endpoint=service.endpoint("device-1")).exists()


def test_a_viewer_posting_the_owners_endpoint_does_not_take_it_over(
    hosted: None, service: PushService, lobby: Lobby
) -> None:
    owner = _browser("boss@example.com", lobby, "owner")
    viewer = _browser("viewer@example.com", lobby, "viewer")
    BoardConfig.objects.create(
        lobby=lobby, viewers_get_notifications=True, updated_at=lobby.created_at
    )
    assert _hosted_subscribe(owner, service.endpoint("boss")).status_code == 201
    [before] = PushSubscription.objects.all()
    answer = _hosted_subscribe(viewer, service.endpoint("boss"))
    assert answer.status_code == 409, answer.content
    assert answer.json()["error"]["code"] == "push_endpoint_taken"
    [after] = PushSubscription.objects.all()
    assert (after.account_id, after.p256dh, after.auth) == (
        before.account_id,
        before.p256dh,
        before.auth,
    )
    # The owner's own browser again is a refresh, as before.
    again = Device().subscription(service.endpoint("boss"))
    answer = _send(owner, "POST", "/push/subscriptions", again, f"https://{HOST}")
    assert answer.status_code == 201
    assert PushSubscription.objects.get().p256dh == again["keys"]["p256dh"]


def test_a_wait_nobody_was_pushed_does_not_hold_back_the_next(
    service: PushService, lobby: Lobby, backend: AgentClient
) -> None:
    backend.ok("set_owner_requests", count=1, line="asked before any device subscribed")
    start = timezone.now()
    alerts.push_pass(start)
    device = _subscribe(service)
    backend.ok("set_owner_requests", count=1, line="asked again")
    assert alerts.push_pass(start + timedelta(seconds=5))["sent"] == 1
    assert [p["body"] for p in _payloads(service, device)] == ["asked again"]


def test_a_message_to_the_owner_pushes_its_sender_not_its_words_until_the_owner_answers(
    service: PushService, lobby: Lobby, lead: AgentClient, backend: AgentClient
) -> None:
    from console.actions.lobby_settings import Actor
    from console.actions.owner_replies import reply_to_agent
    from lobbies.models import Message

    device = _subscribe(service)
    sent = backend.send("owner", "the secret plan", "r-1", kind="question")
    message = Message.objects.get(pk=sent["message_id"])
    assert message.reply_expected and sent["recipients"][0]["agent_id"] == "owner"
    backend.send("owner", "the secret plan", "r-1", kind="question")  # a retry queues nothing
    assert alerts.push_pass() == {"sent": 1, "dropped": 0, "failed": 0, "refused": 0}
    [push] = service.received
    claims = verify_vapid(push.headers["authorization"], vapid.public_key(), service.origin)
    assert claims["sub"].startswith("mailto:")
    payload = device.decrypt(push.body)
    assert payload["title"] == "my-team: backend waits on you"
    assert (payload["lobby"], payload["agent"], payload["reason"], payload["place"]) == (
        "my-team",
        "backend",
        "message",
        "#waiting",
    )
    assert payload["body"] == f"asks you a question (message {message.pk})"
    assert "secret plan" not in json.dumps(payload)
    # Writing to the agent without naming the question answers nothing (question_selectors);
    reply_to_agent(
        Actor.operator(),
        lobby.pk,
        to="backend",
        content="Something else.",
        important=False,
        client_request_id="owner-0",
    )
    alerts.watch_lobbies()
    assert OwnerAlert.objects.get(reason=AlertReason.MESSAGE).settled_at is None
    # the reply naming it does.
    reply_to_agent(
        Actor.operator(),
        lobby.pk,
        to="backend",
        content="Answered.",
        important=False,
        client_request_id="owner-1",
        reply_to=message.pk,
    )
    alerts.watch_lobbies()
    assert OwnerAlert.objects.get(reason=AlertReason.MESSAGE).settled_at is not None


def test_a_request_to_the_owner_pushes_even_when_it_says_no_reply_is_expected(
    service: PushService, lobby: Lobby, backend: AgentClient
) -> None:
    device = _subscribe(service)
    sent = backend.send("owner", "merge?", "r-1", kind="request", reply_expected=False)
    assert alerts.push_pass()["sent"] == 1
    [payload] = _payloads(service, device)
    assert payload["body"] == f"makes you a request (message {sent['message_id']})"


def test_a_message_to_the_owner_that_expects_no_reply_does_not_push(
    service: PushService, lobby: Lobby, backend: AgentClient
) -> None:
    _subscribe(service)
    sent = backend.send("owner", "tests are green", "r-1", kind="report")
    assert sent["status"] == "stored"
    assert alerts.push_pass()["sent"] == 0
    assert service.received == [] and not OwnerAlert.objects.exists()


def test_a_refused_message_to_the_owner_queues_no_push(
    service: PushService, lobby: Lobby, backend: AgentClient
) -> None:
    _subscribe(service)
    later = (timezone.now() + timedelta(hours=1)).isoformat()
    status, body = backend.call(
        "send_message",
        to="owner",
        content="later",
        client_request_id="r-1",
        kind="question",
        deliver_at=later,
    )
    assert (status, body["error"]["code"]) == (400, "invalid_deliver_at")
    assert "owner" in body["error"]["message"]
    assert alerts.push_pass()["sent"] == 0 and not OwnerAlert.objects.exists()


def test_settled_alerts_leave_with_the_retention_sweep(
    service: PushService, lobby: Lobby, backend: AgentClient
) -> None:
    backend.ok("set_owner_requests", count=1, line="one")
    alerts.push_pass()
    backend.ok("set_owner_requests", count=0, line="")
    alerts.push_pass()
    assert alerts.sweep_settled_alerts(timezone.now()) == {"owner_alerts": 0}
    later = timezone.now() + timedelta(days=8)
    assert alerts.sweep_settled_alerts(later) == {"owner_alerts": 1}
    assert not OwnerAlert.objects.exists()


def test_no_worker_for_a_lobby_that_does_not_exist(lobby: Lobby) -> None:
    answer = Client(HTTP_HOST=LOCAL_HOST).get("/no-such-team/push/service-worker.js")
    assert answer.status_code == 404


def _preferences(**changes: Any) -> dict[str, Any]:
    return {
        "time_zone": "Europe/Berlin",
        "quiet_from": "22:00",
        "quiet_until": "07:00",
        "mail_when_waiting": False,
        "mail_after_minutes": 15,
        **changes,
    }


def test_quiet_hours_are_kept_per_person_and_bad_ones_store_nothing(lobby: Lobby) -> None:
    from board.models import AlertPreferences

    client = operator_client()
    for bad, words in (
        (_preferences(time_zone="Mars/Olympus"), "not a time zone"),
        (_preferences(quiet_from="25:00"), "HH:MM"),
        (_preferences(quiet_until=""), "both a start and an end"),
        (_preferences(mail_when_waiting=True), "no address to mail"),
        (_preferences(mail_after_minutes=0), "between 1 and 1440"),
    ):
        answer = _send(client, "POST", "/my-team/push/preferences", bad)
        assert answer.status_code == 400 and words in answer.json()["error"]["message"], bad
    assert not AlertPreferences.objects.exists()
    answer = _send(client, "POST", "/my-team/push/preferences", _preferences())
    assert answer.status_code == 200, answer.content
    saved = AlertPreferences.objects.get(account=None)
    assert (saved.time_zone, saved.quiet_from, saved.quiet_until) == (
        "Europe/Berlin",
        time(22, 0),
        time(7, 0),
    )
    page = client.get("/my-team/").content.decode()
    assert 'value="22:00"' in page and 'value="Europe/Berlin"' in page


def test_settings_open_with_notifications(lobby: Lobby) -> None:
    page = operator_client().get("/my-team/settings").content.decode()
    assert page.index('id="notifications"') < page.index('id="rooms"')
    assert 'id="viewer-notifications"' in page
