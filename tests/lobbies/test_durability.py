"""Accepted means committed: a broker killed with SIGKILL mid-stream loses no answered send.

A real broker subprocess takes concurrent sends from several agents; it is killed while
requests are in flight, restarted on the same data directory, and then every send that was
answered "stored" must be in the sender's history exactly once under the same message_id,
retries must return the original, and sends that got no answer must be stored at most once.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.server import AgentConfig, Broker, BrokerFactory

# The `broker_factory` fixture.
pytest_plugins = ("tests.server_fixtures",)
pytestmark = pytest.mark.slow

LOBBY = "durable-team"
SENDERS = ("alpha", "bravo", "charlie", "delta")
THREADS_PER_SENDER = 2
SENDS_PER_THREAD = 60  # 480 planned; the broker dies long before they are all made
KILL_AFTER_STORED = 200
ENDPOINTS = ("/v1/messages", "/v1/tools/send_message")
LIMITS = {"POCOLOBBY_SENDS_PER_MINUTE": "100000", "POCOLOBBY_QUEUED_MESSAGES": "100000"}


@dataclass
class Attempt:
    sender: str
    endpoint: str
    body: dict[str, Any]
    outcome: str = "unanswered"  # "stored", "unanswered" (no HTTP answer) or "refused"
    message_id: int | None = None
    http_status: int | None = None
    error: str = ""

    @property
    def request_id(self) -> str:
        return str(self.body["client_request_id"])


def recipient_of(sender: str) -> str:
    return SENDERS[(SENDERS.index(sender) + 1) % len(SENDERS)]


def plan(sender: str, thread: int) -> list[Attempt]:
    attempts = []
    for n in range(SENDS_PER_THREAD):
        request_id = f"{sender}-t{thread}-{n:03d}"
        body: dict[str, Any] = {
            "to": recipient_of(sender),
            "content": f"durability probe {request_id} " + "x" * (n % 7) * 40,
            "client_request_id": request_id,
        }
        if n % 3 == 0:
            body["kind"] = "notice"
        if n % 5 == 0:
            body["priority"] = "important"
        attempts.append(Attempt(sender, ENDPOINTS[n % 2], body))
    return attempts


def send(client: httpx.Client, attempt: Attempt) -> httpx.Response:
    return client.post(attempt.endpoint, json=attempt.body)


def sender_thread(
    config: AgentConfig, attempts: list[Attempt], made: list[Attempt], lock: threading.Lock
) -> None:
    """Send until the broker stops answering; record every attempt made, answered or not."""
    with httpx.Client(base_url=config.url, headers=config.headers, timeout=30) as client:
        for attempt in attempts:
            with lock:
                made.append(attempt)
            try:
                response = send(client, attempt)
            except httpx.TransportError as exc:
                attempt.error = type(exc).__name__
                return
            attempt.http_status = response.status_code
            body = response.json()
            # A first send answers duplicate=false; anything else is checked by the main thread.
            if (response.status_code, body.get("status"), body.get("duplicate")) == (
                200,
                "stored",
                False,
            ):
                attempt.outcome, attempt.message_id = "stored", int(body["message_id"])
            else:
                attempt.outcome, attempt.error = "refused", str(body)
                return


def sent_history(broker: Broker, config: AgentConfig) -> dict[str, list[int]]:
    """client_request_id -> message_ids of everything `config`'s agent sent, read page by page."""
    found: dict[str, list[int]] = defaultdict(list)
    cursor: str | None = None
    pages = 0
    with httpx.Client(base_url=broker.url, headers=config.headers, timeout=30) as client:
        while True:
            params = {"view": "history", "limit": "50", **({"cursor": cursor} if cursor else {})}
            response = client.get("/v1/messages", params=params)
            assert response.status_code == 200, response.text
            page = response.json()
            pages += 1
            for message in page["messages"]:
                if message["from"] == config.agent:
                    assert message["to"] == recipient_of(config.agent), message
                    found[message["client_request_id"]].append(int(message["message_id"]))
            cursor = page["next_cursor"]
            if cursor is None:
                return dict(found)
            assert pages < 1000, "history paging does not end"


def all_sent(broker: Broker, configs: dict[str, AgentConfig]) -> dict[tuple[str, str], list[int]]:
    return {
        (sender, request_id): ids
        for sender in SENDERS
        for request_id, ids in sent_history(broker, configs[sender]).items()
    }


def test_answered_sends_survive_sigkill_and_retries_store_at_most_once(
    broker_factory: BrokerFactory, tmp_path: Path
):
    broker = broker_factory(env=LIMITS, name="durable")
    configs = broker.provision(LOBBY, SENDERS, tmp_path / "configs")

    # ---- many concurrent sends; SIGKILL while they are in flight
    made: list[Attempt] = []
    lock = threading.Lock()
    threads = [
        threading.Thread(
            target=sender_thread,
            args=(configs[sender], plan(sender, thread), made, lock),
            name=f"send-{sender}-{thread}",
            daemon=True,
        )
        for sender, thread in itertools.product(SENDERS, range(THREADS_PER_SENDER))
    ]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 120
    while sum(a.outcome == "stored" for a in list(made)) < KILL_AFTER_STORED:
        assert time.monotonic() < deadline, "the sends did not progress"
        assert any(t.is_alive() for t in threads), [(a.request_id, a.error) for a in made]
        time.sleep(0.002)
    broker.kill9()
    for thread in threads:
        thread.join(60)
        assert not thread.is_alive(), f"{thread.name} still running after the kill"

    stored = [a for a in made if a.outcome == "stored"]
    unanswered = [a for a in made if a.outcome == "unanswered"]
    refused = [a for a in made if a.outcome == "refused"]
    assert refused == [], [(a.request_id, a.http_status, a.error) for a in refused]
    assert len(stored) >= KILL_AFTER_STORED
    assert len(made) < len(threads) * SENDS_PER_THREAD, "the kill came after the stream ended"
    # Every thread was still sending: each one's last attempt got no answer.
    assert len(unanswered) == len(threads)
    # And at least one request had reached the broker, not just failed to connect.
    assert any(a.error != "ConnectError" for a in unanswered), [a.error for a in unanswered]
    assert len({a.message_id for a in stored}) == len(stored)

    # ---- restart on the same data directory and port
    broker.start()
    before = all_sent(broker, configs)

    for attempt in stored:
        key = (attempt.sender, attempt.request_id)
        assert before.get(key) == [attempt.message_id], (key, before.get(key))
    attempted = {(a.sender, a.request_id) for a in made}
    phantoms = set(before) - attempted
    assert phantoms == set(), f"messages nobody sent: {sorted(phantoms)}"
    for key, ids in before.items():
        assert len(ids) == 1, (key, ids)
    # An unanswered send was committed or not, but never twice (checked just above).
    committed_unanswered = {
        (a.sender, a.request_id): before[(a.sender, a.request_id)][0]
        for a in unanswered
        if (a.sender, a.request_id) in before
    }

    # ---- retries after the restart
    clients = {
        sender: httpx.Client(base_url=broker.url, headers=config.headers, timeout=30)
        for sender, config in configs.items()
    }
    try:
        for attempt in stored[::5]:
            response = send(clients[attempt.sender], attempt)
            assert response.status_code == 200, response.text
            body = response.json()
            assert body["status"] == "stored"
            assert body["duplicate"] is True, body
            assert body["message_id"] == attempt.message_id

        for attempt in unanswered:
            key = (attempt.sender, attempt.request_id)
            first = send(clients[attempt.sender], attempt)
            assert first.status_code == 200, first.text
            first_body = first.json()
            assert first_body["status"] == "stored"
            if key in committed_unanswered:
                assert first_body["duplicate"] is True, first_body
                assert first_body["message_id"] == committed_unanswered[key]
            else:
                assert first_body["duplicate"] is False, first_body
            again = send(clients[attempt.sender], attempt)
            assert again.status_code == 200, again.text
            assert again.json()["duplicate"] is True
            assert again.json()["message_id"] == first_body["message_id"]
    finally:
        for client in clients.values():
            client.close()

    # ---- the final state: each attempted send exactly once, nothing else
    after = all_sent(broker, configs)
    expected = {(a.sender, a.request_id) for a in [*stored, *unanswered]}
    assert set(after) == expected
    for key, ids in after.items():
        assert len(ids) == 1, (key, ids)
        if key in before:
            assert ids == before[key]
    assert len({ids[0] for ids in after.values()}) == len(after)

    # Each message's delivery row survived with it: the recipients' pending counts match.
    listing = broker.cli("agent", "list", LOBBY, "--json")
    assert listing.returncode == 0, listing.stderr
    pending = {a["agent_id"]: a["pending"] for a in json.loads(listing.stdout)["agents"]}
    addressed = Counter(recipient_of(sender) for sender, _ in after)
    assert pending == {name: addressed.get(name, 0) for name in SENDERS}
