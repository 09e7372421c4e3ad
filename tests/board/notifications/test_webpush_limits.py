"""Web Push isolated and bounded, on the wire against the loopback https stand-in: a push
service that hangs or trickles is let go after the push's limit, one lobby's hanging
pushes never hold up another lobby's, the push connects to the address its check
approved."""

from __future__ import annotations

import concurrent.futures
import socket
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from board.notifications import alerts, vapid
from lobbies.models import Lobby
from tests.board.notifications.webpush_service import NAME, Device, PushService, trusted_service
from tests.server import AgentConfig, Broker, BrokerFactory

pytest_plugins = ("tests.server_fixtures",)

pytestmark = pytest.mark.django_db


@pytest.fixture
def service(settings: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[PushService]:
    with trusted_service(settings, monkeypatch, NAME) as running:
        yield running


def _push(service: PushService, lobby_id: int, name: str, number: int = 1) -> alerts.Push:
    device = Device()
    keys = device.subscription(service.endpoint(name))["keys"]
    payload = {"title": f"{name} waits"}
    return alerts.Push(
        lobby_id, number, service.endpoint(name), keys["p256dh"], keys["auth"], payload
    )


def _send_within(pushes: list[alerts.Push], seconds: float) -> list[alerts.Sent]:
    """send_pushes on a thread, failing the test (not hanging it) if it never returns."""
    with concurrent.futures.ThreadPoolExecutor(1) as thread:
        sending = thread.submit(alerts.send_pushes, pushes, vapid.broker_vapid(), seconds)
        return sending.result(timeout=30)


@pytest.mark.parametrize("mode", ["hang", "trickle"])
def test_a_push_service_that_hangs_or_trickles_is_let_go_after_the_limit(
    service: PushService, lobby: Lobby, mode: Any
) -> None:
    service.mode = mode
    service.trickle_seconds = 0.5  # a line every 0.5 s: no read times out, 100 lines take 50 s
    assert _send_within([_push(service, lobby.pk, "slowpoke")], seconds=2) == [(1, "failed")]
    service.wait_for(lambda: service.let_go == ["/push/slowpoke"])
    assert service.received == []


def test_a_slow_answer_within_the_limit_is_sent(service: PushService, lobby: Lobby) -> None:
    service.mode = "slow"
    service.slow_seconds = 0.5
    assert _send_within([_push(service, lobby.pk, "patient")], seconds=10) == [(1, "sent")]
    assert [r.path for r in service.received] == ["/push/patient"]


def test_one_lobbys_hanging_pushes_never_hold_up_another_lobbys(
    service: PushService, lobby: Lobby
) -> None:
    other = Lobby.objects.create(name="other", created_at=lobby.created_at)
    for number in range(1, 7):
        service.modes[f"team-{number}"] = "hang"
    team = [_push(service, lobby.pk, f"team-{n}", n) for n in range(1, 7)]
    senders = alerts.LobbySenders(seconds=60)
    try:
        senders.submit(team, vapid.broker_vapid())
        service.wait_for(lambda: len(service.held) == 1)
        senders.submit([_push(service, other.pk, "other", 7)], None)
        service.wait_for(lambda: [r.path for r in service.received] == ["/push/other"])
        # `other` arrived while team's first push still hangs and its others wait their turn.
        assert [r.path for r in service.held] == ["/push/team-1"]
        assert service.let_go == []
        senders.running[other.pk].result(timeout=30)
        assert senders.finished() == [(7, "sent")]
        # More for team while it hangs: its queue keeps the newest PUSH_BACKLOG.
        more = range(100, 103 + alerts.PUSH_BACKLOG)
        senders.submit([_push(service, lobby.pk, "team-1", n) for n in more], None)
        assert senders.finished() == [(100, "failed"), (101, "failed"), (102, "failed")]
        assert len(senders.queued[lobby.pk]) == alerts.PUSH_BACKLOG
    finally:
        senders.shutdown()


# A global address the check approves; the test's network routes it to the stand-in.
PUBLIC = "8.8.4.4"


def test_the_push_connects_to_the_address_its_check_approved(
    service: PushService, lobby: Lobby, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A name (not on the allow list) resolves to a public address for the check, then to
    a loopback one: the push goes to the checked address, with the name's SNI, certificate
    check and Host, and never asks the name again."""
    settings.POCOLOBBY_PUSH_ENDPOINT_ALLOW = frozenset()
    real_resolve, real_connect = socket.getaddrinfo, socket.create_connection
    answers = iter([PUBLIC])
    asked: list[str] = []

    def rebinding(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if host != NAME:
            return real_resolve(host, port, *args, **kwargs)
        asked.append(host)
        return real_resolve(next(answers, "127.0.0.2"), port, *args, **kwargs)

    def routed(address: tuple[str, int], *args: Any, **kwargs: Any) -> socket.socket:
        host, port = address
        return real_connect(("127.0.0.1" if host == PUBLIC else host, port), *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    monkeypatch.setattr(socket, "create_connection", routed)
    push = _push(service, lobby.pk, "named")
    named = f"https://{NAME}:{service.port}/push/named"
    push = alerts.Push(lobby.pk, 1, named, push.p256dh, push.auth, push.payload)
    assert _send_within([push], seconds=5) == [(1, "sent")]
    assert asked == [NAME]
    [received] = service.received
    assert received.headers["host"] == f"{NAME}:{service.port}"


def test_a_certificate_not_made_for_the_endpoints_name_fails_the_push(
    service: PushService, lobby: Lobby, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = socket.getaddrinfo

    def to_stand_in(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        return real("127.0.0.1" if host == "wrong.test" else host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", to_stand_in)
    settings.POCOLOBBY_PUSH_ENDPOINT_ALLOW = frozenset({f"wrong.test:{service.port}"})
    push = _push(service, lobby.pk, "wrong")
    wrong = f"https://wrong.test:{service.port}/push/wrong"
    push = alerts.Push(lobby.pk, 1, wrong, push.p256dh, push.auth, push.payload)
    assert _send_within([push], seconds=5) == [(1, "failed")]
    assert service.received == []


# --- the serve loop itself ---------------------------------------------------------------


def _subscribe_in_store(broker: Broker, lobby: str, endpoint: str) -> None:
    """The local operator's subscription, written as the page's POST writes it."""
    keys = Device().subscription(endpoint)["keys"]
    with sqlite3.connect(broker.data_dir / "pocolobby.sqlite3", timeout=30) as db:
        db.execute(
            "INSERT INTO board_pushsubscription (lobby_id, account_id, endpoint, p256dh, auth,"
            " created_at) SELECT id, NULL, ?, ?, ?, ? FROM lobbies_lobby WHERE name = ?",
            (endpoint, keys["p256dh"], keys["auth"], "2026-12-04 00:00:00", lobby),
        )


def _ask_owner(broker: Broker, agent: AgentConfig, line: str) -> None:
    answer = httpx.post(
        f"{broker.url}/v1/tools/set_owner_requests",
        json={"count": 1, "line": line},
        headers=agent.headers,
        timeout=10,
    )
    assert answer.status_code == 200, answer.text


@pytest.mark.slow
def test_the_serve_loop_pushes_a_lobby_while_another_lobbys_pushes_hang(
    broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    with PushService() as service:
        broker = broker_factory(
            env={
                "POCOLOBBY_PUSH_ENDPOINT_ALLOW": service.host_port,
                "REQUESTS_CA_BUNDLE": str(service.ca),
            }
        )
        team = broker.provision("team", ["lead"], tmp_path)["lead"]
        other = broker.provision("other", ["worker"], tmp_path)["worker"]
        for number in range(1, 7):
            service.modes[f"team-{number}"] = "hang"
            _subscribe_in_store(broker, "team", service.endpoint(f"team-{number}"))
        _subscribe_in_store(broker, "other", service.endpoint("other"))
        _ask_owner(broker, team, "approve the release")
        service.wait_for(lambda: len(service.held) == 1)
        _ask_owner(broker, other, "pick a name")
        service.wait_for(lambda: bool(service.received))
        # It arrived while team's pushes still hang (one at a time, 10 s each at most).
        still_held = len(service.held) - len(service.let_go)
        assert [r.path for r in service.received] == ["/push/other"]
        assert still_held == 1 and len(service.held) < 6
