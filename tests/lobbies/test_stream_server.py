"""The bridge stream over a real socket: a real broker subprocess (`pocolobby serve`, embedded
SQLite store), agents provisioned with the real CLI, and the `websockets` client as the bridge.

Covers what the in-process tests (test_stream.py) cannot: delivery through the real server
(uvicorn) and TCP, pending work across a SIGKILL and restart, fencing of stale processes, and
junk on the wire.
"""

from __future__ import annotations

import asyncio
import signal
import socket
from pathlib import Path

import pytest

from tests.bridge_client import (
    Bridge,
    StreamClosed,
    acknowledge,
    api,
    new_runtime,
    payload,
    send_message,
)
from tests.server import Broker, BrokerFactory

pytest_plugins = ("tests.server_fixtures",)
pytestmark = [pytest.mark.slow, pytest.mark.asyncio]


async def provision(broker: Broker, lobby: str, agents: list[str], config_dir: Path) -> dict:
    """The real CLI, off the event loop; name -> token."""
    configs = await asyncio.to_thread(broker.provision, lobby, agents, config_dir)
    return {name: config.token for name, config in configs.items()}


async def pushed(bridge: Bridge, message_id: int) -> dict:
    """The messages notice that carries exactly `message_id`."""
    notice = await bridge.notice("messages")
    assert notice["message_ids"] == [message_id], notice
    return notice


# ---------------------------------------------------------------- (a) delivery


async def test_a_message_sent_over_http_reaches_the_recipients_socket_with_its_body(
    module_broker: Broker, tmp_path: Path
):
    tokens = await provision(module_broker, "push-team", ["alpha", "beta"], tmp_path)
    async with await Bridge.connect(module_broker.url, tokens["beta"]) as beta:
        welcome, bootstrap = await beta.bootstrapped()
        assert welcome["generation"] == 1 and welcome["lobby_id"] == "push-team"
        assert payload(bootstrap)["backlog"] == {"count": 0, "message_ids": []}
        await beta.report(bootstrap, "received", "host_written")

        body = 'Ship it? {"from": "owner"} \u00e9\u2713\n--second line'
        sent = await send_message(
            module_broker.url, tokens["alpha"], "beta", body, "a-1", kind="question"
        )
        notice = await beta.notice("messages")
        assert notice["message_ids"] == [sent] and notice["generation"] == 1
        assert notice["content"].startswith(
            "PocoLobby question from alpha (reply expected): direct message.\n"
        )
        (message,) = payload(notice)["messages"]
        assert (message["message_id"], message["from"], message["content"]) == (
            sent,
            "alpha",
            body,
        )
        assert notice["meta"]["from"] == "alpha" and notice["meta"]["agent_id"] == "beta"
        await beta.report(notice, "received", "host_written")
        await beta.nothing()


# ---------------------------------------------------------------- (b) SIGKILL and restart


async def test_pending_work_survives_sigkill_into_the_bootstrap_and_a_reconnect(
    broker_factory: BrokerFactory, tmp_path: Path
):
    broker = broker_factory(name="crash")
    tokens = await provision(broker, "crash-team", ["alpha", "beta"], tmp_path)
    alpha = tokens["alpha"]

    async def send(content: str) -> int:
        return await send_message(broker.url, alpha, "beta", content, f"req-{content.split()[0]}")

    runtime = new_runtime()
    beta = await Bridge.connect(broker.url, tokens["beta"], runtime)
    welcome, bootstrap = await beta.bootstrapped()
    assert welcome["generation"] == 1
    await beta.report(bootstrap, "received", "host_written")

    handled = await send("m0 handled")  # acknowledged: no longer pending
    await beta.report(await pushed(beta, handled), "received", "host_written")
    await acknowledge(broker.url, tokens["beta"], [handled])
    written = await send("m1 written to the host, unacknowledged")
    await beta.report(await pushed(beta, written), "received", "host_written")
    received = await send("m2 received by the bridge only")
    await beta.report(await pushed(beta, received), "received")
    unreported = await send("m3 pushed, nothing reported")
    await pushed(beta, unreported)
    await beta.roundtrip()
    await beta.close()
    never_pushed = [await send("m4 while disconnected"), await send("m5 while disconnected")]
    pending = [written, received, unreported, *never_pushed]

    await asyncio.to_thread(broker.kill9)
    await asyncio.to_thread(broker.start)

    # The same process reconnecting after the restart: generation 1 is still current, and
    # what it never confirmed writing to the host comes again, with what it never got.
    beta = await Bridge.connect(broker.url, tokens["beta"], runtime, generation=1)
    assert (await beta.welcome(bootstrap=False))["generation"] == 1
    again = await beta.notice("messages")
    assert again["message_ids"] == [received, unreported, *never_pushed], again
    await beta.close()

    # A new process of the same conversation: a new generation, and a bootstrap naming
    # exactly the pending messages, pushed or not, in order; the acknowledged one is not named.
    beta = await Bridge.connect(broker.url, tokens["beta"], runtime)
    welcome, bootstrap = await beta.bootstrapped()
    assert welcome["generation"] == 2 and bootstrap["generation"] == 2
    assert payload(bootstrap)["backlog"] == {"count": len(pending), "message_ids": pending}
    assert bootstrap["message_ids"] == pending and bootstrap["count"] == len(pending)
    await beta.report(bootstrap, "received", "host_written")
    await beta.nothing()  # the backlog is not pushed again as bodies

    unwritten = await send("m6 pushed to generation 2, not written")
    await pushed(beta, unwritten)
    await beta.roundtrip()

    await asyncio.to_thread(broker.kill9)
    await beta.close()
    await asyncio.to_thread(broker.start)
    later = await send("m7 after the second restart")

    # The same process reconnecting after the restart: its generation is still current.
    beta = await Bridge.connect(broker.url, tokens["beta"], runtime, generation=2)
    welcome = await beta.welcome(bootstrap=False)
    assert welcome["generation"] == 2
    notice = await beta.notice("messages")
    assert notice["message_ids"] == [unwritten, later], notice
    assert [m["content"] for m in payload(notice)["messages"]] == [
        "m6 pushed to generation 2, not written",
        "m7 after the second restart",
    ]
    await beta.report(notice, "received", "host_written")

    # The first process's generation stays superseded across the restarts.
    stale = await Bridge.connect(broker.url, tokens["beta"], runtime, generation=1)
    error, code = await stale.refused()
    assert (error["code"], code) == ("generation_superseded", 4409)
    await beta.roundtrip()  # the current one was not disturbed
    await beta.close()


# ---------------------------------------------------------------- (c) fencing


async def test_stale_and_foreign_processes_are_closed_with_4409(
    module_broker: Broker, tmp_path: Path
):
    tokens = await provision(module_broker, "fence-team", ["gamma"], tmp_path)
    url, token = module_broker.url, tokens["gamma"]
    runtime = new_runtime()

    first = await Bridge.connect(url, token, runtime)
    first_generation = (await first.bootstrapped())[0]["generation"]
    second = await Bridge.connect(url, token, runtime)  # the conversation restarted its bridge
    second_generation = (await second.bootstrapped())[0]["generation"]
    assert second_generation == first_generation + 1
    error, code = await first.refused()  # the live older socket is fenced at once
    assert (error["code"], error["status"], code) == ("generation_superseded", 409, 4409)

    for generation in (first_generation, second_generation + 5):
        stale = await Bridge.connect(url, token, runtime, generation=generation)
        error, code = await stale.refused()
        assert (error["code"], code) == ("generation_superseded", 4409), generation
    foreign = await Bridge.connect(url, token, new_runtime())
    error, code = await foreign.refused()
    assert (error["code"], code) == ("runtime_conflict", 4409)
    assert "reset-runtime fence-team gamma" in error["message"]
    garbled = await Bridge.connect(url, token, runtime, generation="two")
    error, code = await garbled.refused()
    assert (error["code"], code) == ("invalid_generation", 4400)
    await second.roundtrip()  # none of the refusals touched the current process

    # A reconnect of the current generation takes over from its stale twin.
    twin = await Bridge.connect(url, token, runtime, generation=second_generation)
    assert (await twin.welcome(bootstrap=False))["generation"] == second_generation
    error, code = await second.refused()
    assert (error["code"], code) == ("generation_superseded", 4409)
    await twin.roundtrip()
    await twin.close()


# ---------------------------------------------------------------- (d) junk


JUNK = [
    ("{nope", "invalid_frame"),
    ("", "invalid_frame"),
    ("[1, 2]", "invalid_frame"),
    ('"heartbeat"', "invalid_frame"),
    ('{"type": 5}', "invalid_frame"),
    ('{"kind": "heartbeat"}', "invalid_frame"),
    ('{"type": "launch"}', "unknown_frame_type"),
    ('{"type": "received"}', "unknown_notice"),
    ('{"type": "received", "notice_id": "not-a-uuid"}', "unknown_notice"),
    ('{"type": "host_written", "notice_id": 12}', "unknown_notice"),
    (
        '{"type": "host_written", "notice_id": "00000000-0000-0000-0000-000000000000"}',
        "unknown_notice",
    ),
    (b"\x00\xff binary", "invalid_frame"),
    ('{"type": "heartbeat", "pad": "' + "x" * 20_000 + '"}', "frame_too_large"),
]


def raw_junk(port: int, data: bytes) -> bytes:
    """Write bytes that are not HTTP to the broker's port; whatever it answers, up to a close."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(data)
        answer = b""
        try:
            while chunk := sock.recv(4096):
                answer += chunk
        except TimeoutError:
            pass
        return answer


async def test_junk_frames_get_error_frames_and_the_broker_keeps_serving(
    module_broker: Broker, tmp_path: Path
):
    tokens = await provision(module_broker, "junk-team", ["alpha", "beta", "gamma"], tmp_path)
    url = module_broker.url
    gamma = await Bridge.connect(url, tokens["gamma"])
    _, gamma_bootstrap = await gamma.bootstrapped()
    beta = await Bridge.connect(url, tokens["beta"])
    await beta.bootstrapped()

    for data, code in JUNK:
        await beta.send(data)
        error = await beta.frame()
        assert (error["type"], error["code"]) == ("error", code), (data[:60], error)
    # Another agent's notice is not this process's to report.
    await beta.send({"type": "host_written", "notice_id": gamma_bootstrap["notice_id"]})
    assert (await beta.frame())["code"] == "unknown_notice"
    await beta.roundtrip()  # the junk sender's own socket is still open and served

    # Junk below the WebSocket layer: bytes that are not HTTP, an upgrade without its key,
    # and a socket dropped in the middle of a frame.
    not_http = await asyncio.to_thread(
        raw_junk, module_broker.port, b"\x16\x03\x01\x02junk\r\n\r\n"
    )
    assert not_http.startswith(b"HTTP/1.1 400"), not_http
    keyless = await asyncio.to_thread(
        raw_junk,
        module_broker.port,
        b"GET /v1/stream HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
        b"Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\n\r\n",
    )
    assert keyless.startswith(b"HTTP/1.1 400"), keyless
    dropped = await Bridge.connect(url, tokens["alpha"])
    await dropped.bootstrapped()
    dropped.connection.transport.write(b"\x81\xfe\x40\x00\x01\x02")  # a frame header, cut short
    dropped.connection.transport.abort()

    # The other client was served all along, and still is; so is the junk sender.
    for bridge, name in ((gamma, "gamma"), (beta, "beta")):
        sent = await send_message(url, tokens["alpha"], name, f"still there, {name}?", f"j-{name}")
        notice = await pushed(bridge, sent)
        assert payload(notice)["messages"][0]["content"] == f"still there, {name}?"
        await bridge.report(notice, "received", "host_written")
    # A new process of the conversation whose socket was dropped is served too.
    newcomer = await Bridge.connect(url, tokens["alpha"], dropped.runtime)
    welcome, _ = await newcomer.bootstrapped()
    assert welcome["generation"] == 2
    for bridge in (gamma, beta, newcomer):
        await bridge.close()


async def test_a_permission_change_announces_the_new_catalog_revision_to_the_bridge(
    module_broker: Broker, tmp_path: Path
):
    tokens = await provision(module_broker, "catalog-team", ["alpha"], tmp_path)
    before = (await api(module_broker.url, tokens["alpha"], "GET", "/v1/tools"))["revision"]
    async with await Bridge.connect(module_broker.url, tokens["alpha"]) as alpha:
        await alpha.bootstrapped()
        changed = await asyncio.to_thread(
            module_broker.cli_ok,
            "agent",
            "permissions",
            "catalog-team",
            "alpha",
            "--broadcast",
            "yes",
        )
        assert "broadcast yes" in changed.stdout
        frame = await alpha.frame()
        tools = await api(module_broker.url, tokens["alpha"], "GET", "/v1/tools")
        assert frame == {"type": "catalog", "revision": tools["revision"]}
        assert tools["revision"] != before
        assert "broadcast" in {t["name"] for t in tools["tools"]}
        # Nothing changed (refused as permissions_unchanged), nothing announced.
        unchanged = await asyncio.to_thread(
            module_broker.cli,
            "agent",
            "permissions",
            "catalog-team",
            "alpha",
            "--broadcast",
            "yes",
        )
        assert unchanged.returncode == 1 and "already has them" in unchanged.stderr
        await alpha.nothing()


# ---------------------------------------------------------------- (e) an orderly stop


async def test_stopping_the_broker_closes_sockets_for_a_restart_and_exits_on_its_own(
    broker_factory: BrokerFactory, tmp_path: Path
):
    broker = broker_factory()
    tokens = await provision(broker, "stop-team", ["alpha"], tmp_path)
    alpha = await Bridge.connect(broker.url, tokens["alpha"])
    await alpha.bootstrapped()

    await asyncio.to_thread(broker.stop)  # SIGTERM; SIGKILL only after 10 s
    # It finished on its own (uvicorn re-raises the signal it stopped for), not by SIGKILL.
    assert broker.process is not None and broker.process.returncode in (0, -signal.SIGTERM)
    with pytest.raises(StreamClosed) as closed:
        await alpha.frame(timeout=5)
    assert closed.value.code == 1012  # service restart: a bridge reconnects, it does not stop

    await asyncio.to_thread(broker.start)
    again = await Bridge.connect(broker.url, tokens["alpha"], alpha.runtime, generation=1)
    assert (await again.welcome(bootstrap=False))["generation"] == 1  # it picks up where it was
    await again.close()
