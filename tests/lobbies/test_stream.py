"""The bridge stream: authentication, runtime ownership, pushes and bad frames."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta

import pytest
import pytest_asyncio
from channels.layers import get_channel_layer
from django.test import override_settings
from django.utils import timezone

from lobbies.actions import operator
from lobbies.actions.messages import send_message
from lobbies.actions.receipts import acknowledge_messages
from lobbies.actions.runtime import RuntimeCaller
from lobbies.agent_selectors import list_agents
from lobbies.api.schemas import SendMessage
from lobbies.errors import BrokerError
from lobbies.models import AuditEvent, BrokerProcess, Connection, Delivery, Message, Notice
from lobbies.push.consumers import BATCH_MAX, Batches
from lobbies.wire.frames import MAX_PUSH_CONTENT_BYTES
from pocolobby.bridge import link
from pocolobby.config import Bounds
from tests.lobbies.stream import (
    bootstrapped,
    closed_with,
    frame,
    new_runtime,
    open_stream,
    settled,
    sync,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio]


@pytest_asyncio.fixture(autouse=True)
async def fresh_layer():
    yield
    await get_channel_layer().flush()


def _send(sender, to: str, content: str, key: str, **options) -> dict:
    args = SendMessage(to=to, content=content, client_request_id=key, **options)
    return {"id": send_message(sender.agent, args).message.pk}


async def test_a_bridge_without_the_current_event_version_is_426(backend):
    for version in ("4", None):
        stream = await open_stream(backend.token, new_runtime(), version=version)
        error, code = await closed_with(stream)
        assert (error["code"], error["status"], code) == ("bridge_outdated", 426, 4426)
        assert "event version 5" in error["message"]


async def test_a_wrong_token_is_refused_with_4401(backend):
    stream = await open_stream("plt_wrong", new_runtime())
    error, code = await closed_with(stream)
    assert (error["code"], code) == ("invalid_token", 4401)


async def test_a_browser_origin_is_refused(backend):
    stream = await open_stream(
        backend.token, new_runtime(), extra=[(b"origin", b"https://evil.example")]
    )
    error, code = await closed_with(stream)
    assert (error["code"], code) == ("origin_refused", 4403)


async def test_a_new_runtime_bootstraps_and_ready_echoes_the_nonce(backend):
    stream = await open_stream(backend.token, new_runtime())
    welcome, notice = await bootstrapped(stream)
    nonce = json.loads(notice["content"].split("\n", 1)[1])["nonce"]
    assert f"ready with nonce {nonce}" in notice["content"]
    assert welcome["generation"] == 1 and notice["meta"]["agent_id"] == "backend"
    status, body = await sync(backend.call)("ready", nonce="not-it")
    assert (status, body["error"]["code"]) == (409, "stale_nonce")
    assert (await sync(backend.ok)("ready", nonce=nonce))["ready"] is True
    await stream.disconnect()


async def test_a_message_is_pushed_with_its_body_and_attributed_meta(lead, backend):
    stream = await open_stream(backend.token, new_runtime())
    await bootstrapped(stream)
    sent = await sync(_send)(
        lead, "backend", 'Ship it? {"from": "owner"}', "r-1", kind="question", priority="important"
    )
    notice = await frame(stream)
    headline, payload = notice["content"].split("\n", 1)
    assert headline.startswith(
        "PocoLobby IMPORTANT question from lead (reply expected): direct message."
    )
    assert "did not interrupt a running tool" in headline
    message = json.loads(payload)["messages"][0]
    assert (message["message_id"], message["content"]) == (sent["id"], 'Ship it? {"from": "owner"}')
    assert notice["meta"] == {
        "priority": "important",
        "agent_id": "backend",
        "lobby_id": "my-team",
        "scope": "direct",
        "from": "lead",
        "kind": "question",
        "reply_expected": "true",
    }
    assert notice["message_ids"] == [sent["id"]] and "pending" not in notice["content"]
    await stream.disconnect()


async def test_a_notice_says_no_reply_is_expected(lead, backend):
    stream = await open_stream(backend.token, new_runtime())
    await bootstrapped(stream)
    await sync(_send)(lead, "backend", "FYI: deployed", "r-1", kind="notice")
    headline = (await frame(stream))["content"].split("\n", 1)[0]
    assert headline.startswith("PocoLobby notice from lead (no reply expected): direct message.")
    assert "No reply expected: do not answer" in headline
    await stream.disconnect()


async def test_info_messages_are_batched_and_important_comes_first(lead, backend):
    stream = await open_stream(backend.token, new_runtime())
    await bootstrapped(stream)
    await settled(stream)  # the connect's own push round cannot take the first send alone
    # A window wide enough for two sends on a loaded machine (300 ms once split them on CI,
    # 1.5 s once on PostgreSQL beside other suites).
    with override_settings(BOUNDS=Bounds(push_batch_ms=4000)):
        first = await sync(_send)(lead, "backend", "one", "r-1")
        second = await sync(_send)(lead, "backend", "two", "r-2")
        notice = await frame(stream, timeout=8)
    assert notice["message_ids"] == [first["id"], second["id"]]
    assert notice["content"].startswith("PocoLobby 2 messages from lead.")
    with override_settings(BOUNDS=Bounds(push_batch_ms=8000)):
        info = await sync(_send)(lead, "backend", "later", "r-3")
        urgent = await sync(_send)(lead, "backend", "stop the merge", "r-4", priority="important")
        notice = await frame(stream, timeout=3)  # well before the 8 s batching delay
    assert notice["message_ids"] == [urgent["id"], info["id"]]
    assert "1 IMPORTANT, listed first" in notice["content"]
    await stream.disconnect()


async def test_a_push_over_the_size_cap_carries_a_count_and_a_marker(lead, backend):
    stream = await open_stream(backend.token, new_runtime())
    await bootstrapped(stream)
    with override_settings(BOUNDS=Bounds(push_bytes=600)):
        await sync(_send)(lead, "backend", "x" * 2000, "r-1")
        notice = await frame(stream)
    payload = json.loads(notice["content"].split("\n", 1)[1])
    assert notice["truncated"] is True and payload["truncated"] is True and payload["count"] == 1
    assert "content" not in payload["messages"][0]
    assert payload["messages"][0]["content_bytes"] == 2000
    assert "get_messages" in notice["content"].split("\n", 1)[0]
    await stream.disconnect()


async def test_a_push_at_the_highest_push_bytes_fits_the_bridges_frame_bound(lead, backend):
    """Issue 28: the cap was measured before the frame escaped the content a second time, so
    20,000 quotes (40,000 bytes of content) made an 80,000-byte frame, which a bridge refuses
    and which then stayed pending behind reminders."""
    stream = await open_stream(backend.token, new_runtime())
    await bootstrapped(stream)
    with override_settings(BOUNDS=Bounds(push_bytes=MAX_PUSH_CONTENT_BYTES)):
        for n, text in enumerate(['"' * 20_000, "\\" * 20_000, "\x01" * 10_000]):
            await sync(_send)(lead, "backend", text, f"q-{n}")
            notice = await frame(stream)
            size = len(json.dumps(notice, ensure_ascii=False).encode())
            assert size <= link.MAX_PUSH_BYTES, (n, size)
            assert notice["truncated"] is True, n
        await sync(_send)(lead, "backend", "y" * 60_000, "whole")
        whole = await frame(stream)  # plain text under the cap still goes whole
        assert whole["truncated"] is False
        assert len(json.dumps(whole, ensure_ascii=False).encode()) <= link.MAX_PUSH_BYTES
    await stream.disconnect()


async def test_backlog_arrives_as_one_coalesced_bootstrap_notice(lead, backend):
    ids = [(await sync(_send)(lead, "backend", f"m{n}", f"r-{n}"))["id"] for n in range(4)]
    stream = await open_stream(backend.token, new_runtime())
    _, notice = await bootstrapped(stream)
    payload = json.loads(notice["content"].split("\n", 1)[1])
    assert payload["backlog"] == {"count": 4, "message_ids": ids}
    assert notice["message_ids"] == ids and "m0" not in notice["content"]
    assert await stream.receive_nothing(timeout=0.3)
    await stream.disconnect()


def _nonce(notice: dict) -> str:
    return json.loads(notice["content"].split("\n", 1)[1])["nonce"]


async def test_another_conversation_gets_runtime_conflict_until_the_owner_resets(backend):
    holder = new_runtime()
    first = await open_stream(backend.token, holder)
    _, notice = await bootstrapped(first)
    await sync(backend.ok)("ready", nonce=_nonce(notice))
    intruder = await open_stream(backend.token, new_runtime())
    error, code = await closed_with(intruder)
    assert (error["code"], code) == ("runtime_conflict", 4409)
    assert "reset-runtime my-team backend" in error["message"]
    await first.disconnect()
    # Socket loss alone transfers nothing.
    again = await open_stream(backend.token, new_runtime())
    assert (await closed_with(again))[0]["code"] == "runtime_conflict"

    await sync(operator.reset_runtime)("my-team", "backend")
    newcomer = await open_stream(backend.token, new_runtime())
    await bootstrapped(newcomer)
    await newcomer.disconnect()
    retired = await open_stream(backend.token, holder)
    assert (await closed_with(retired))[0]["code"] == "runtime_retired"


async def test_a_binding_never_ready_and_not_connected_yields_to_another_conversation(backend):
    """`claude mcp list` starts the bridge under a throwaway conversation that handshakes
    and exits without ready: the user's real session then takes the agent."""
    health_check = new_runtime()
    probe = await open_stream(backend.token, health_check)
    welcome, _ = await bootstrapped(probe)
    await probe.disconnect()

    session = new_runtime()
    real = await open_stream(backend.token, session)
    taken, notice = await bootstrapped(real)
    assert taken["runtime_id"] == session
    assert taken["generation"] == welcome["generation"] + 1
    audit = await sync(lambda: list(AuditEvent.objects.order_by("pk").values("action", "detail")))()
    assert audit[-1] == {
        "action": "runtime_taken_over",
        "detail": {
            "runtime_id": session,
            "generation": taken["generation"],
            "taken_from": health_check,
        },
    }
    # The old runtime is fenced: its writes and its reconnects are refused.
    fenced = RuntimeCaller(health_check, welcome["generation"])
    with pytest.raises(BrokerError) as refused:
        await sync(lambda: acknowledge_messages(backend.agent, [1], fenced))()
    assert refused.value.code == "generation_superseded"
    rejoin = await open_stream(backend.token, health_check, generation=welcome["generation"])
    assert (await closed_with(rejoin))[0]["code"] == "runtime_conflict"
    # Once this conversation completed ready, the old rule holds again: no takeover.
    await sync(backend.ok)("ready", nonce=_nonce(notice))
    await real.disconnect()
    again = await open_stream(backend.token, new_runtime())
    assert (await closed_with(again))[0]["code"] == "runtime_conflict"


async def test_a_binding_never_ready_but_connected_keeps_the_agent(backend):
    first = await open_stream(backend.token, new_runtime())
    await bootstrapped(first)
    second = await open_stream(backend.token, new_runtime())
    assert (await closed_with(second))[0]["code"] == "runtime_conflict"
    await first.disconnect()


async def test_a_ready_conversation_keeps_the_agent_across_its_own_restart(backend):
    """Ready once is ready for the conversation: a restarted process of it that has not
    confirmed again yet, then lost its socket, still holds the binding."""
    holder = new_runtime()
    first = await open_stream(backend.token, holder)
    _, notice = await bootstrapped(first)
    await sync(backend.ok)("ready", nonce=_nonce(notice))
    await first.disconnect()
    restarted = await open_stream(backend.token, holder)
    await bootstrapped(restarted)
    await restarted.disconnect()
    other = await open_stream(backend.token, new_runtime())
    assert (await closed_with(other))[0]["code"] == "runtime_conflict"


async def test_a_restarted_process_fences_the_earlier_one(lead, backend):
    runtime = new_runtime()
    old = await open_stream(backend.token, runtime)
    welcome_old, _ = await bootstrapped(old)
    new = await open_stream(backend.token, runtime)  # same conversation, new process
    welcome_new, _ = await bootstrapped(new)
    assert welcome_new["generation"] == welcome_old["generation"] + 1
    error, code = await closed_with(old)
    assert (error["code"], code) == ("generation_superseded", 4409)
    # The partitioned old process cannot rejoin with its generation...
    rejoin = await open_stream(backend.token, runtime, generation=welcome_old["generation"])
    assert (await closed_with(rejoin))[0]["code"] == "generation_superseded"
    # ...and its writes are fenced.
    sent = await sync(_send)(lead, "backend", "m", "r-1")
    stale = RuntimeCaller(runtime, welcome_old["generation"])
    with pytest.raises(BrokerError) as refused:
        await sync(acknowledge_messages)(backend.agent, [sent["id"]], stale)
    assert refused.value.code == "generation_superseded"
    current = RuntimeCaller(runtime, welcome_new["generation"])
    result = await sync(acknowledge_messages)(backend.agent, [sent["id"]], current)
    assert result.acknowledged == [sent["id"]]
    await new.disconnect()


async def test_a_reconnect_keeps_its_generation_and_gets_unwritten_pushes_again(lead, backend):
    runtime = new_runtime()
    stream = await open_stream(backend.token, runtime)
    welcome, _ = await bootstrapped(stream)
    sent = await sync(_send)(lead, "backend", "m", "r-1")
    lost = await frame(stream)
    await stream.disconnect()  # the network dropped before the host write was confirmed
    again = await open_stream(backend.token, runtime, generation=welcome["generation"])
    hello = await frame(again)
    assert hello["type"] == "welcome" and hello["bootstrap"] is False
    repeat = await frame(again)
    assert repeat["message_ids"] == [sent["id"]] and repeat["notice_id"] != lost["notice_id"]
    await again.send_json_to({"type": "host_written", "notice_id": repeat["notice_id"]})
    await again.send_json_to({"type": "heartbeat"})
    assert (await frame(again))["type"] == "heartbeat"
    await again.disconnect()
    third = await open_stream(backend.token, runtime, generation=welcome["generation"])
    assert (await frame(third))["type"] == "welcome"
    assert await third.receive_nothing(timeout=0.3)  # written to the host: not repeated
    await third.disconnect()


async def test_transport_facts_reach_the_sender_per_generation(lead, backend):
    stream = await open_stream(backend.token, new_runtime())
    welcome, _ = await bootstrapped(stream)
    sent = await sync(_send)(lead, "backend", "m", "r-1")
    notice = await frame(stream)
    await stream.send_json_to({"type": "received", "notice_id": notice["notice_id"]})
    await stream.send_json_to({"type": "host_written", "notice_id": notice["notice_id"]})
    await stream.send_json_to({"type": "heartbeat"})
    await frame(stream)
    delivery = await sync(Delivery.objects.get)(message_id=sent["id"])
    assert delivery.adapter_received_at and delivery.notification_attempted_at
    assert delivery.notified_generation == welcome["generation"]
    facts = (await sync(lead.ok)("get_messages", view="history"))["messages"][0]["recipients"][0]
    assert facts["notification_attempted_at"] and facts["agent_seen_at"] is None
    stored = await sync(Notice.objects.get)(id=notice["notice_id"])
    assert stored.generation == welcome["generation"] and stored.host_written_at
    await stream.disconnect()


async def test_bad_frames_get_error_frames_and_change_nothing(lead, backend):
    stream = await open_stream(backend.token, new_runtime())
    await bootstrapped(stream)
    before = await sync(lambda: (Message.objects.count(), Notice.objects.count()))()
    cases = [
        ("{nope", "invalid_frame"),
        ("[1, 2]", "invalid_frame"),
        ("[" * 8000 + "]" * 8000, "invalid_frame"),  # nested past the decoder's recursion
        (json.dumps({"type": "launch"}), "unknown_frame_type"),
        (json.dumps({"type": "received", "notice_id": "not-a-uuid"}), "unknown_notice"),
        ("x" * 20_000, "frame_too_large"),
    ]
    for text, code in cases:
        await stream.send_to(text_data=text)
        assert (await frame(stream))["code"] == code
    await stream.send_json_to({"type": "heartbeat"})
    assert (await frame(stream))["type"] == "heartbeat"  # still serving
    assert await sync(lambda: (Message.objects.count(), Notice.objects.count()))() == before
    await stream.disconnect()


async def test_a_frame_nesting_too_deeply_is_refused_by_name(lead, backend):
    stream = await open_stream(backend.token, new_runtime())
    await bootstrapped(stream)
    for depth in (64, 300, 1024):
        text = '{"type": "heartbeat", "extra": ' + "[" * depth + "]" * depth + "}"
        await stream.send_to(text_data=text)
        refusal = await frame(stream)
        assert refusal["code"] == "invalid_frame", refusal
        assert refusal["message"] == "the frame nests JSON deeper than 64 levels"
    await stream.send_json_to({"type": "heartbeat"})
    assert (await frame(stream))["type"] == "heartbeat"  # still serving
    await stream.disconnect()


async def test_disabling_the_agent_closes_its_stream(backend):
    stream = await open_stream(backend.token, new_runtime())
    await bootstrapped(stream)
    await sync(operator.disable_agent)("my-team", "backend")
    error, code = await closed_with(stream)
    assert (error["code"], code) == ("agent_disabled", 4403)


async def test_presence_shows_the_connection_while_it_is_open(lead, backend):
    def entry() -> dict:
        return {a["agent_id"]: a for a in list_agents(lead.agent)["agents"]}["backend"]

    assert (await sync(entry)())["connected"] is False
    stream = await open_stream(backend.token, new_runtime())
    await bootstrapped(stream)
    shown = await sync(entry)()
    assert shown["connected"] is True and shown["last_heartbeat_at"]
    await stream.disconnect()
    assert (await sync(entry)())["connected"] is False


async def test_an_old_connection_reads_offline_once_its_process_stops_beating(backend):
    stream = await open_stream(backend.token, new_runtime())
    await bootstrapped(stream)
    await sync(BrokerProcess.objects.update)(last_seen_at=timezone.now() - timedelta(minutes=5))
    shown = await sync(lambda: list_agents(backend.agent)["agents"][0])()
    assert shown["connected"] is False
    await stream.disconnect()


async def test_the_owners_reset_closes_the_holders_stream(backend):
    stream = await open_stream(backend.token, new_runtime())
    await bootstrapped(stream)
    await sync(operator.reset_runtime)("my-team", "backend")
    error, code = await closed_with(stream)
    assert (error["code"], code) == ("runtime_retired", 4403)


async def test_a_lobby_host_serves_no_stream_in_hosted_mode(backend, settings):
    settings.POCOLOBBY_DOMAIN = "pocolobby.test"
    settings.POCOLOBBY_API_HOSTS = frozenset({"api.pocolobby.test"})
    stream = await open_stream(
        backend.token, new_runtime(), extra=[(b"host", b"team.pocolobby.test")]
    )
    error, code = await closed_with(stream)
    assert (error["code"], code) == ("not_found", 4404)
    api = await open_stream(backend.token, new_runtime(), extra=[(b"host", b"api.pocolobby.test")])
    welcome, _notice = await bootstrapped(api)
    assert welcome["generation"] == 1
    await api.disconnect()


async def test_sockets_connecting_together_are_answered_each_on_its_own(lead, backend):
    """Connects that arrive together share one transaction; a refusal stays its socket's."""
    streams = await asyncio.gather(
        open_stream(lead.token, new_runtime()),
        open_stream("plt_wrong", new_runtime()),
        open_stream(backend.token, new_runtime()),
    )
    assert (await closed_with(streams[1]))[0]["code"] == "invalid_token"
    welcomes = [(await bootstrapped(streams[n]))[0] for n in (0, 2)]
    assert [w["agent_id"] for w in welcomes] == ["lead", "backend"]
    agents = await sync(lambda: sorted(Connection.objects.values_list("agent__agent_id")))()
    assert agents == [("backend",), ("lead",)]
    for stream in streams:
        await stream.disconnect()


async def test_a_burst_is_written_in_bounded_batches_and_each_gets_its_own_answer():
    sizes: list[int] = []

    def write(items: list[int]) -> list[int | Exception]:
        sizes.append(len(items))
        return [ValueError(f"refused {i}") if i % 7 == 0 else i * 2 for i in items]

    batches = Batches(write)
    answers = await asyncio.gather(*(batches(i) for i in range(450)), return_exceptions=True)
    assert sum(sizes) == 450 and max(sizes) <= BATCH_MAX and len(sizes) >= 3
    for i, answer in enumerate(answers):
        if i % 7 == 0:
            assert isinstance(answer, ValueError) and str(answer) == f"refused {i}"
        else:
            assert answer == i * 2


async def test_notices_over_the_per_minute_cap_wait_and_go_as_one(lead, backend):
    stream = await open_stream(backend.token, new_runtime())
    await bootstrapped(stream)
    with override_settings(BOUNDS=Bounds(notices_per_minute=2)):
        first = await sync(_send)(lead, "backend", "one", "c-1", priority="important")
        assert (await frame(stream))["message_ids"] == [first["id"]]
        second = await sync(_send)(lead, "backend", "two", "c-2", priority="important")
        assert (await frame(stream))["message_ids"] == [second["id"]]
        # The first notice leaves the one-minute window in about a second and a half.
        await sync(
            lambda: Notice.objects.filter(message_ids=[first["id"]]).update(
                created_at=timezone.now() - timedelta(seconds=58.5)
            )
        )()
        third = await sync(_send)(lead, "backend", "three", "c-3", priority="important")
        fourth = await sync(_send)(lead, "backend", "four", "c-4", priority="important")
        assert await stream.receive_nothing(timeout=0.5)  # over the cap: nothing yet
        states = await sync(
            lambda: set(Delivery.objects.filter(recipient=backend.agent).values_list("state"))
        )()
        assert states == {("pending",)}  # waiting, never dropped
        notice = await frame(stream, timeout=5)
    assert notice["message_ids"] == [third["id"], fourth["id"]]  # coalesced into one
    await stream.disconnect()


async def test_a_delivery_frame_records_the_transport_and_a_bad_one_records_nothing(lead, backend):
    stream = await open_stream(backend.token, new_runtime())
    await bootstrapped(stream)

    def transport() -> tuple[str, object]:
        entry = {a["agent_id"]: a for a in lead.ok("list_agents")["agents"]}["backend"]
        return entry["transport"], entry["notices_held"]

    assert await sync(transport)() == ("channel", None)
    for bad, named in [
        ({"type": "delivery", "transport": "fax"}, "transport"),
        ({"type": "delivery", "transport": "tmux", "held": "yes"}, "held"),
        (
            {"type": "delivery", "transport": "tmux", "held": True, "held_reason": "x" * 300},
            "held_reason",
        ),
    ]:
        await stream.send_json_to(bad)
        error = await frame(stream)
        assert (error["code"], named in error["message"]) == ("invalid_frame", True)
    assert await sync(transport)() == ("channel", None)  # nothing recorded

    await stream.send_json_to(
        {"type": "delivery", "transport": "tmux", "held": True, "held_reason": "busy"}
    )
    await stream.send_json_to({"type": "heartbeat"})
    assert (await frame(stream))["type"] == "heartbeat"  # answered after the frame before it
    kind, held = await sync(transport)()
    assert kind == "tmux" and held["reason"] == "busy"
    await stream.disconnect()
    assert (await sync(transport)())[0] == "none"
