"""Attachments against the real broker subprocess: the fast lane's upload budget, refusals
before a body is read, and a SIGKILL between upload and send leaving no orphan."""

from __future__ import annotations

import hashlib
import select
import socket
import time
from pathlib import Path

import httpx
import pytest

from tests.server import Broker, BrokerFactory

pytest_plugins = ("tests.server_fixtures",)
pytestmark = pytest.mark.slow

MIB = 1024 * 1024
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def describe(data: bytes, name: str = "shot.png") -> dict:
    return {"sha256": sha(data), "name": name, "media_type": "image/png", "size": len(data)}


def put(http: httpx.Client, headers: dict, data: bytes) -> httpx.Response:
    return http.put(
        f"/v1/attachments/{sha(data)}",
        content=data,
        headers={**headers, "Content-Type": "image/png"},
    )


def stored(broker: Broker) -> list[str]:
    folder = broker.data_dir / "attachments"
    return sorted(p.name for p in folder.iterdir() if p.name != ".lock") if folder.exists() else []


def test_the_bridge_flow_over_http_send_409_upload_exactly_the_missing_repeat_once(
    broker: Broker, tmp_path: Path
) -> None:
    agents = broker.provision("files", ["lead", "backend", "outsider"], tmp_path / "configs")
    lead, backend, outsider = agents["lead"], agents["backend"], agents["outsider"]
    request = {
        "to": "backend",
        "content": "before/after",
        "client_request_id": "shot-1",
        "attachments": [describe(PNG)],
    }
    with httpx.Client(base_url=broker.url, timeout=10) as http:
        first = http.post("/v1/messages", headers=lead.headers, json=request)
        assert first.status_code == 409
        assert first.json()["error"]["missing"] == [sha(PNG)]
        assert stored(broker) == []
        uploaded = put(http, lead.headers, PNG)
        assert uploaded.status_code == 201 and uploaded.json()["size"] == len(PNG)
        again = http.post("/v1/messages", headers=lead.headers, json=request)
        assert again.status_code == 200
        [file] = again.json()["attachments"]
        retry = http.post("/v1/messages", headers=lead.headers, json=request)
        assert retry.json()["duplicate"] is True and retry.json()["attachments"] == [file]
        assert stored(broker) == [sha(PNG)]
        got = http.get(f"/v1/attachments/{file['id']}", headers=backend.headers)
        assert got.status_code == 200 and got.content == PNG
        assert got.headers["content-type"] == "image/png"
        stranger = http.get(f"/v1/attachments/{file['id']}", headers=outsider.headers)
        assert stranger.status_code == 404
        # The catalog offers the model local paths; the route took descriptions.
        tools = http.get("/v1/tools", headers=lead.headers).json()["tools"]
        send = next(t for t in tools if t["name"] == "send_message")
        assert send["input_schema"]["properties"]["attachments"]["items"]["type"] == "string"
    # The owner lists metadata and usage with the CLI; there is no command for content.
    listing = broker.cli_ok("attachments", "files").stdout
    assert f"{len(PNG)} of 1073741824 bytes" in listing and "shot.png" in listing


def _hold_an_upload_open(broker: Broker, token: str, size: int) -> socket.socket:
    """Headers declaring `size` bytes and only part of the body: the reservation is held."""
    connection = socket.create_connection(("127.0.0.1", broker.port), timeout=10)
    head = (
        f"PUT /v1/attachments/{'0' * 64} HTTP/1.1\r\nHost: 127.0.0.1:{broker.port}\r\n"
        f"Authorization: Bearer {token}\r\nContent-Type: image/png\r\n"
        f"Content-Length: {size}\r\n\r\n"
    )
    connection.sendall(head.encode() + b"\x89PNG")
    return connection


def test_uploads_share_a_memory_budget_reserved_before_the_body_is_read(
    broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    broker = broker_factory(env={"POCOLOBBY_UPLOAD_MEMORY_BYTES": str(len(PNG) + 100)})
    lead = broker.provision("busy", ["lead"], tmp_path / "configs")["lead"]
    held = _hold_an_upload_open(broker, lead.token, 200)
    try:
        with httpx.Client(base_url=broker.url, timeout=10) as http:
            deadline = time.monotonic() + 10
            while True:  # until the held upload has reserved its 200 bytes
                busy = put(http, lead.headers, PNG)
                if busy.status_code == 503 or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            assert busy.status_code == 503
            assert busy.json()["error"]["code"] == "uploads_busy"
            assert "POCOLOBBY_UPLOAD_MEMORY_BYTES" in busy.json()["error"]["message"]
            assert busy.headers["retry-after"] == "1"
            assert stored(broker) == []
            held.close()  # a truncated upload: refused, its reservation released
            deadline = time.monotonic() + 10
            while (answer := put(http, lead.headers, PNG)).status_code == 503:
                assert time.monotonic() < deadline
                time.sleep(0.05)
            assert answer.status_code == 201
            assert stored(broker) == [sha(PNG)]
    finally:
        held.close()


def test_an_upload_over_its_limit_or_without_a_length_is_refused_before_its_body(
    broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    broker = broker_factory(env={"POCOLOBBY_ATTACHMENT_IMAGE_BYTES": "1000"})
    lead = broker.provision("limits", ["lead"], tmp_path / "configs")["lead"]
    with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as connection:
        head = (
            f"PUT /v1/attachments/{'0' * 64} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Authorization: Bearer {lead.token}\r\nContent-Type: image/png\r\n"
            "Content-Length: 5000000\r\nConnection: close\r\n\r\n"
        )
        connection.sendall(head.encode())  # and no body at all: the answer comes anyway
        received = b""
        while chunk := connection.recv(65536):  # the head and the body may come apart
            received += chunk
        answer = received.decode(errors="replace")
    assert answer.startswith("HTTP/1.1 413") and "attachment_too_large" in answer
    assert "POCOLOBBY_ATTACHMENT_IMAGE_BYTES" in answer
    # A truncated upload (the client goes away mid-body) is refused and stores nothing.
    with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as connection:
        head = (
            f"PUT /v1/attachments/{sha(PNG[:500])} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Authorization: Bearer {lead.token}\r\nContent-Type: image/png\r\n"
            "Content-Length: 500\r\n\r\n"
        )
        connection.sendall(head.encode() + PNG[:100])
        connection.shutdown(socket.SHUT_WR)
        connection.recv(65536)
    with httpx.Client(base_url=broker.url, timeout=10) as http:
        missing = http.put(
            f"/v1/attachments/{sha(PNG)}", content=PNG, headers={**lead.headers}
        )  # no Content-Type: not an attachment type
        assert missing.status_code == 415
    assert stored(broker) == []


def test_a_broker_killed_between_upload_and_send_leaves_no_orphan_after_the_grace_period(
    broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    grace = 2
    broker = broker_factory(env={"POCOLOBBY_UPLOAD_GRACE_SECONDS": str(grace)})
    lead = broker.provision("crash", ["lead", "backend"], tmp_path / "configs")["lead"]
    with httpx.Client(base_url=broker.url, timeout=10) as http:
        assert put(http, lead.headers, PNG).status_code == 201
    assert stored(broker) == [sha(PNG)]
    broker.kill9()  # the send never came
    # A temporary file of an upload cut off mid-write is collected the same way.
    (broker.data_dir / "attachments" / f".{sha(PNG)}.1.1.tmp").write_bytes(PNG[:10])
    time.sleep(grace + 1)
    broker.start()  # the retention sweep runs at start
    deadline = time.monotonic() + 20
    while stored(broker) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert stored(broker) == []
    with httpx.Client(base_url=broker.url, timeout=10) as http:
        request = {
            "to": "backend",
            "content": "late send",
            "client_request_id": "c-1",
            "attachments": [describe(PNG)],
        }
        late = http.post("/v1/messages", headers=lead.headers, json=request)
        assert late.status_code == 409 and late.json()["error"]["missing"] == [sha(PNG)]


def _answer(connection: socket.socket, within: float) -> bytes:
    """The server's first answer on `connection` (one read), or b"" if none came in time."""
    connection.settimeout(within)
    try:
        return connection.recv(65536)
    except TimeoutError:
        return b""


def test_one_agents_stalled_uploads_leave_room_for_another_lobby_and_time_out(
    broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    """Issue 28: an agent of another lobby held 7 PUTs open with 2 bytes sent each, and every
    upload on the broker got 503 uploads_busy, still at 65 s."""
    broker = broker_factory(env={"POCOLOBBY_BODY_STALL_SECONDS": "6"})
    hog = broker.provision("hogs", ["hog"], tmp_path / "hogs")["hog"]
    other = broker.provision("others", ["writer"], tmp_path / "others")["writer"]
    ten_mib = 10 * 1024 * 1024
    held = [_hold_an_upload_open(broker, hog.token, ten_mib) for _ in range(7)]
    started = time.monotonic()
    try:
        with httpx.Client(base_url=broker.url, timeout=10) as http:
            # The hog holds at most its share (an eighth of 64 MiB: one 10 MiB upload); the
            # others it opened were refused at once, naming that share.
            refused = [_answer(c, 1) for c in held]
            busy = [r for r in refused if r.startswith(b"HTTP/1.1 503")]
            assert len(busy) == 6, refused
            assert all(b"this agent's uploads in progress hold" in r for r in busy)
            [stalled] = [c for c, r in zip(held, refused, strict=True) if not r]
            # Another lobby's upload goes through while the hog's upload is still stalled.
            uploaded = put(http, other.headers, PNG)
            assert uploaded.status_code == 201, uploaded.text
            assert _answer(stalled, 0.1) == b"", "answered before its stall bound"
            # The stalled upload is answered 408 and closed within its bound, and its share
            # is free again: the hog uploads once more.
            timed_out = _answer(stalled, 20)
            waited = time.monotonic() - started
            assert timed_out.startswith(b"HTTP/1.1 408"), timed_out
            assert b"body_timeout" in timed_out and b"POCOLOBBY_BODY_STALL_SECONDS" in timed_out
            assert _answer(stalled, 5) == b""  # then closed
            assert 5 <= waited < 20, waited
            again = put(http, hog.headers, PNG + b"hog")
            assert again.status_code == 201, again.text
        assert stored(broker) == sorted([sha(PNG), sha(PNG + b"hog")])
    finally:
        for connection in held:
            connection.close()


def _refused_at_once(connections: list[socket.socket], count: int) -> list[bytes]:
    """The answers of the `count` connections the server answers (503s at once), waiting on
    them; the others, reserved and stalled, stay unanswered."""
    answers: dict[socket.socket, bytes] = {}
    deadline = time.monotonic() + 10
    while len(answers) < count:
        assert time.monotonic() < deadline, answers
        ready, _, _ = select.select([c for c in connections if c not in answers], [], [], 0.2)
        for connection in ready:
            answers[connection] = connection.recv(65536)
    return list(answers.values())


def test_two_lobbies_of_stalled_uploads_leave_room_for_a_third_lobbys_upload(
    broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    """Issue 39: three 10 MiB and one 2 MiB stalled upload in each of two lobbies held all
    64 MiB of upload memory; a third lobby's 1 KiB upload was refused `503 uploads_busy`."""
    broker = broker_factory()
    names = ["a", "b", "c", "d", "probe"]
    held: list[socket.socket] = []
    try:
        for lobby in ("left", "right"):
            agents = broker.provision(lobby, names, tmp_path / lobby)
            tens = [_hold_an_upload_open(broker, agents[n].token, 10 * MIB) for n in "abc"]
            held += tens
            # The lobby holds its share (a quarter, 16 MiB): one 10 MiB upload is kept, the
            # other two are refused at once, naming the lobby's share.
            refused = _refused_at_once(tens, 2)
            assert all(r.startswith(b"HTTP/1.1 503") for r in refused), refused
            assert all(
                b"this lobby's uploads in progress hold 10485760 bytes" in r for r in refused
            )
            held.append(_hold_an_upload_open(broker, agents["d"].token, 2 * MIB))
            # Wait until the 2 MiB upload holds its reservation: a 9 MiB one of the same agent
            # is refused by the agent's share only then (the lobby's share before).
            deadline = time.monotonic() + 10
            while True:
                with _hold_an_upload_open(broker, agents["d"].token, 9 * MIB) as probe:
                    answer = _answer(probe, 10)
                assert answer.startswith(b"HTTP/1.1 503"), answer
                if b"this agent's uploads in progress hold 2097152" in answer:
                    break
                assert time.monotonic() < deadline, answer
                time.sleep(0.05)
        third = broker.provision("third", ["writer"], tmp_path / "third")["writer"]
        small = PNG[:1024]
        with httpx.Client(base_url=broker.url, timeout=10) as http:
            uploaded = put(http, third.headers, small)
        assert uploaded.status_code == 201, uploaded.text
        assert sha(small) in stored(broker)
    finally:
        for connection in held:
            connection.close()


def test_an_upload_with_a_wrong_token_is_refused_before_its_body_and_holds_nothing(
    broker: Broker,
) -> None:
    connection = _hold_an_upload_open(broker, "plt_not-a-token", 10 * 1024 * 1024)
    with connection:
        answer = _answer(connection, 5)
    assert answer.startswith(b"HTTP/1.1 401") and b"invalid_token" in answer
