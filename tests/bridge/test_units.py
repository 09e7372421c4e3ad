"""The bridge's parts in-process, with a fake host and a fake broker: catalog comparison, what
happens to each notice, the stream, and what the bridge prints (the runtime id and the
configuration file are in test_config.py).

These need no subprocess; the end-to-end behaviour is in test_bridge.py.
"""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest

from lobbies.wire import frames
from pocolobby.bridge import core, link, listing, notices
from pocolobby.bridge.broker import Outcome
from pocolobby.bridge.catalog import Catalog, CatalogError, compare, local_guide
from pocolobby.bridge.config import (
    AgentConfig,
    Runtime,
)
from pocolobby.bridge.core import Bridge
from pocolobby.bridge.host import HostGone
from pocolobby.bridge.notices import clean_meta
from pocolobby.bridge.pane import TurnEdges, host_of
from pocolobby.bridge.results import Stop
from pocolobby.bridge.server import TerminalSafeFormatter
from pocolobby.bridge.tools import OWN_TOOLS, instructions_for
from tests.server import REPO_ROOT

# ---------------------------------------------------------------- the catalog


def _tool(name: str, *arguments: str, description: str = "Does it. More words.") -> dict:
    return {
        "name": name,
        "description": description,
        "input_schema": {
            "type": "object",
            "properties": {a: {"type": "string", "description": f"The {a}"} for a in arguments},
            "required": list(arguments[:1]),
        },
    }


def _catalog(revision: str, *tools: dict) -> Catalog:
    return Catalog.parse({"revision": revision, "tools": list(tools)})


@pytest.mark.parametrize(
    "data",
    [
        [],
        {"revision": "", "tools": []},
        {"revision": "r", "tools": {}},
        {"revision": "r", "tools": [{"name": "bad name", "input_schema": {"type": "object"}}]},
        {"revision": "r", "tools": [{"name": "x", "input_schema": {"type": "array"}}]},
        {"revision": "r", "tools": [_tool("x"), _tool("x")]},
    ],
)
def test_a_malformed_catalog_is_refused(data: Any):
    with pytest.raises(CatalogError):
        Catalog.parse(data)


def test_comparing_revisions_names_new_operations_and_arguments_only():
    seen = _catalog("r1", _tool("send_message", "to", "content"), _tool("old_op"))
    current = _catalog(
        "r2",
        _tool("send_message", "to", "content", "deliver_at", description="Reworded."),
        _tool("broadcast", "content"),
    )
    change = compare(seen, current)
    assert change.added == ("broadcast",) and change.removed == ("old_op",)
    assert change.new_arguments == (("send_message", ("deliver_at",)),)
    sentence = change.sentence()
    for word in ("r2", "broadcast", "deliver_at", "old_op", "list_operations", "call_operation"):
        assert word in sentence
    wording = _catalog(
        "r3", _tool("send_message", "to", "content", description="New words."), _tool("old_op")
    )
    assert not compare(seen, wording)


def test_the_local_tool_guide_lists_purposes_and_arguments():
    guide = local_guide(_catalog("r", _tool("send_message", "to", "content")))
    assert guide == {
        "send_message": {
            "purpose": "Does it",
            "arguments": {"to": "required; The to", "content": "The content"},
        }
    }


def test_meta_keeps_only_identifier_keys_with_string_values():
    raw = {
        "priority": "info",
        "from": "a",
        "reply_expected": "true",
        "bad-key": "x",
        "1st": "x",
        "count": 3,
        "room_ids": ["a"],
        "_ok": "y",
    }
    assert clean_meta(raw) == {
        "priority": "info",
        "from": "a",
        "reply_expected": "true",
        "_ok": "y",
    }
    assert clean_meta(None) == {} and clean_meta([("a", "b")]) == {}


def test_backoff_is_jittered_exponential_and_capped():
    for attempt in range(12):
        step = min(link.BACKOFF_CAP, link.BACKOFF_FIRST * 2**attempt)
        delays = {link.backoff(attempt) for _ in range(20)}
        assert all(step / 2 <= d <= step for d in delays) and len(delays) > 1
    assert link.stream_url("https://lobby.example/") == "wss://lobby.example/v1/stream"
    assert link.stream_url("http://127.0.0.1:8787") == "ws://127.0.0.1:8787/v1/stream"


# ---------------------------------------------------------------- notices, with fakes


class FakeHost:
    def __init__(self) -> None:
        self.written: list[tuple[str, dict[str, Any] | None]] = []
        self.gone = False

    async def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        if self.gone:
            raise HostGone("closed")
        self.written.append((method, params))

    def channel(self) -> list[dict[str, Any]]:
        return [p for m, p in self.written if m == notices.CHANNEL_METHOD and p is not None]


class FakeBroker:
    def __init__(self, catalogs: list[Outcome] | None = None) -> None:
        self.generation: int | None = None
        self.runtime_id = "r"
        self.catalogs = catalogs or [Outcome(data={"revision": "r1", "tools": [_tool("a", "x")]})]
        self.answers: dict[str, Outcome] = {}
        self.calls: list[tuple[str, dict[str, Any]]] = []

    async def catalog(self) -> Outcome:
        return self.catalogs.pop(0) if len(self.catalogs) > 1 else self.catalogs[0]

    async def call(self, name: str, arguments: dict[str, Any]) -> Outcome:
        self.calls.append((name, arguments))
        return self.answers.get(name, Outcome(data={"ok": True}))


def make_bridge(broker: FakeBroker | None = None) -> tuple[Bridge, FakeHost, FakeBroker]:
    host, fake = FakeHost(), broker or FakeBroker()
    config = AgentConfig(Path("/nonexistent"), "http://127.0.0.1:9", "plt_x", "team", "beta")
    bridge = Bridge(config, Runtime("r", "conversation"), host, fake)  # type: ignore[arg-type]
    return bridge, host, fake


class Frames:
    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    async def __call__(self, frame: dict[str, Any]) -> None:
        self.sent.append(frame)

    def kinds(self, notice_id: str) -> list[str]:
        return [f["type"] for f in self.sent if f["notice_id"] == notice_id]


def notice(
    notice_id: str, kind: str, ids: list[int], payload: dict | None = None, meta: dict | None = None
) -> dict[str, Any]:
    body = payload if payload is not None else {"messages": [{"message_id": i} for i in ids]}
    return {
        "type": "notice",
        "event_version": frames.EVENT_VERSION,
        "notice_id": notice_id,
        "notice_kind": kind,
        "generation": 1,
        "as_of": "2026-12-03T12:00:00.000Z",
        "message_ids": ids,
        "count": len(ids),
        "truncated": False,
        "content": "PocoLobby headline.\n" + json.dumps(body),
        "meta": meta
        or {"priority": "info", "scope": "direct", "agent_id": "beta", "lobby_id": "team"},
        "extensions": {},
    }


def welcome(bridge: Bridge, generation: int = 1, bootstrap: bool = True) -> None:
    bridge.on_welcome(
        {
            "type": "welcome",
            "event_version": frames.EVENT_VERSION,
            "generation": generation,
            "bootstrap": bootstrap,
            "agent_id": "beta",
            "lobby_id": "team",
            "runtime_id": "r",
        }
    )


async def ready(bridge: Bridge, frames: Frames, nonce: str = "n1") -> None:
    await bridge.on_notice(notice("boot", "bootstrap", [], {"nonce": nonce}), frames)
    assert (await bridge.call_tool("ready", {"nonce": nonce})).is_error is False


@pytest.mark.asyncio
async def test_a_notice_is_received_written_with_clean_meta_then_confirmed():
    bridge, host, _ = make_bridge()
    frames = Frames()
    meta = {"priority": "info", "scope": "direct", "from": "alpha", "x-evil": "1", "n": 2}
    await bridge.on_notice(notice("n-1", "messages", [7], meta=meta), frames)
    assert frames.kinds("n-1") == ["received", "host_written"]
    (written,) = host.channel()
    assert written["meta"] == {"priority": "info", "scope": "direct", "from": "alpha"}
    assert written["content"].startswith("PocoLobby headline.\n")


@pytest.mark.asyncio
async def test_a_failed_host_write_is_never_confirmed():
    bridge, host, _ = make_bridge()
    host.gone = True
    frames = Frames()
    await bridge.on_notice(notice("n-1", "messages", [7]), frames)
    assert frames.kinds("n-1") == ["received"]


@pytest.mark.asyncio
async def test_notices_about_messages_this_process_acknowledged_are_dropped():
    broker = FakeBroker()
    broker.answers["acknowledge_messages"] = Outcome(data={"acknowledged": [7, 8]})
    bridge, host, _ = make_bridge(broker)
    welcome(bridge)
    frames = Frames()
    await bridge.call_tool("acknowledge_messages", {"message_ids": [7, 8]})
    await bridge.on_notice(notice("hint-1", "hint", [7, 8], {"message_ids": [7, 8]}), frames)
    await bridge.on_notice(notice("n-2", "messages", [8, 9]), frames)
    assert frames.kinds("hint-1") == ["received"]
    assert frames.kinds("n-2") == ["received", "host_written"]
    assert len(host.channel()) == 1


@pytest.mark.asyncio
async def test_a_bootstrap_whose_nonce_was_echoed_is_not_written_again():
    bridge, host, _ = make_bridge()
    welcome(bridge)
    frames = Frames()
    await ready(bridge, frames, "n1")
    await bridge.on_notice(notice("boot-2", "bootstrap", [], {"nonce": "n1"}), frames)
    await bridge.on_notice(notice("boot-3", "bootstrap", [], {"nonce": "n2"}), frames)
    assert frames.kinds("boot-2") == ["received"]
    assert frames.kinds("boot-3") == ["received", "host_written"]
    assert len(host.channel()) == 2


@pytest.mark.asyncio
async def test_a_catalog_change_is_told_once_after_bootstrap_and_never_for_wording(monkeypatch):
    monkeypatch.setattr(listing, "CATALOG_RETRY_DELAYS", ())
    v1 = Outcome(data={"revision": "r1", "tools": [_tool("send_message", "to")]})
    reworded = Outcome(
        data={"revision": "r2", "tools": [_tool("send_message", "to", description="Reworded.")]}
    )
    grown = Outcome(
        data={
            "revision": "r3",
            "tools": [_tool("send_message", "to", "deliver_at"), _tool("broadcast", "content")],
        }
    )
    broker = FakeBroker([v1])
    bridge, host, _ = make_bridge(broker)
    await bridge.refresh_catalog()
    welcome(bridge)
    frames = Frames()
    # Before ready, a new revision is not told.
    broker.catalogs = [grown]
    await bridge.refresh_catalog()
    await bridge.on_notice(notice("boot", "bootstrap", [], {"nonce": "n1"}), frames)
    assert "tools changed" not in host.channel()[-1]["content"]
    await bridge.call_tool("ready", {"nonce": "n1"})
    await bridge.on_notice(notice("m1", "messages", [1]), frames)
    assert "tools changed" not in host.channel()[-1]["content"]  # the bootstrap showed r3

    broker.catalogs = [v1]
    await bridge.refresh_catalog()
    await bridge.call_tool("list_operations", {})  # the model has now seen r1
    broker.catalogs = [reworded]
    await bridge.refresh_catalog()
    await bridge.on_notice(notice("m2", "messages", [2]), frames)
    assert "tools changed" not in host.channel()[-1]["content"]
    broker.catalogs = [grown]
    await bridge.refresh_catalog()
    await bridge.on_notice(notice("m3", "messages", [3]), frames)
    told = host.channel()[-1]["content"]
    assert "broadcast" in told and "deliver_at" in told and "call_operation" in told
    assert told.startswith("PocoLobby headline.\n")
    await bridge.on_notice(notice("m4", "messages", [4]), frames)
    assert "tools changed" not in host.channel()[-1]["content"]


@pytest.mark.asyncio
async def test_tools_list_changed_only_after_the_host_listed_and_only_on_a_new_revision(
    monkeypatch,
):
    monkeypatch.setattr(listing, "CATALOG_RETRY_DELAYS", ())
    first = Outcome(data={"revision": "r1", "tools": [_tool("a", "x")]})
    broker = FakeBroker([first])
    bridge, host, _ = make_bridge(broker)
    await bridge.refresh_catalog()
    assert host.written == []  # the host never listed tools
    bridge.tools()  # the host is answered a list of r1
    await bridge.refresh_catalog()
    assert host.written == []  # same revision
    broker.catalogs = [Outcome(data={"revision": "r2", "tools": "junk"})]
    await bridge.refresh_catalog()
    assert host.written == [] and bridge.catalog is not None
    assert bridge.catalog.revision == "r1" and bridge.catalog_error
    broker.catalogs = [Outcome(transport="not_sent", message="refused")]
    await bridge.refresh_catalog()
    assert bridge.catalog.revision == "r1"
    broker.catalogs = [Outcome(data={"revision": "r2", "tools": [_tool("a", "x"), _tool("b")]})]
    await bridge.refresh_catalog()
    assert host.written == [("notifications/tools/list_changed", None)]
    names = [t.name for t in bridge.tools()]
    assert names[:2] == ["a", "b"] and "call_operation" in names


@pytest.mark.asyncio
async def test_own_tools_take_the_catalogs_schema_when_the_broker_lists_the_name(monkeypatch):
    monkeypatch.setattr(listing, "CATALOG_RETRY_DELAYS", ())
    ready_schema = _tool("ready", "nonce", "checkpoint_revision")
    broker = FakeBroker([Outcome(data={"revision": "r", "tools": [ready_schema]})])
    bridge, _, _ = make_bridge(broker)
    await bridge.refresh_catalog()
    tools = {t.name: t for t in bridge.tools()}
    assert list(tools["ready"].input_schema["properties"]) == ["nonce", "checkpoint_revision"]
    assert list(tools["get_context"].input_schema["properties"]) == ["cursor"]
    assert len(tools) == len(OWN_TOOLS)


@pytest.mark.asyncio
async def test_bad_arguments_and_failures_become_tool_errors(monkeypatch):
    monkeypatch.setattr(core, "LINK_WAIT_SECONDS", 0.01)
    bridge, _, broker = make_bridge()
    answer = await bridge.call_tool("send_message", ["not", "an", "object"])
    assert answer.is_error and "arguments" in answer.content[0].text  # type: ignore[union-attr]
    not_linked = await bridge.call_tool("send_message", {"client_request_id": "c"})
    assert not_linked.is_error and "Not sent" in _text(not_linked) and broker.calls == []
    welcome(bridge)
    broker.answers["send_message"] = Outcome(transport="unknown", message="ReadTimeout")
    unknown = await bridge.call_tool("send_message", {"client_request_id": "c"})
    assert "Outcome unknown" in _text(unknown) and "same client_request_id" in _text(unknown)
    broker.answers["send_message"] = Outcome(transport="not_sent", message="ConnectError")
    assert "Nothing was stored" in _text(await bridge.call_tool("send_message", {}))
    broker.answers["send_message"] = Outcome(status=500, code="internal_error", message="boom")
    assert "outcome is unknown" in _text(await bridge.call_tool("send_message", {}))

    async def explode(name: str, arguments: dict[str, Any]) -> Outcome:
        raise RuntimeError("unexpected")

    monkeypatch.setattr(broker, "call", explode)
    crashed = await bridge.call_tool("get_messages", {})
    assert crashed.is_error and "RuntimeError" in _text(crashed)


@pytest.mark.asyncio
async def test_a_stopped_bridge_refuses_locally_and_says_what_to_do():
    bridge, host, broker = make_bridge()
    await bridge.on_stop(Stop("runtime_conflict", 409, "another conversation holds beta"))
    (told,) = host.channel()
    assert "pocolobby agent hand-over team beta" in told["content"]
    assert told["meta"]["scope"] == "notice"
    refused = await bridge.call_tool("send_message", {"to": "a"})
    assert refused.is_error and "runtime_conflict" in _text(refused) and broker.calls == []
    context = await bridge.call_tool("get_context", {})
    assert context.is_error and '"connection":"stopped"' in _text(context)


def _text(result: types.CallToolResult) -> str:
    return "".join(c.text for c in result.content if isinstance(c, types.TextContent))


# ---------------------------------------------------------------- the process


def test_the_bridge_and_the_cli_import_no_django_and_of_the_broker_only_its_wire():
    code = (
        "import sys, pocolobby.cli, pocolobby.bridge.server, pocolobby.bridge.connect\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('django', 'channels', 'daphne', 'lobbies', 'twisted') "
        "and m not in ('lobbies', 'lobbies.wire') and not m.startswith('lobbies.wire.'))\n"
        "print(bad)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert result.stdout.strip() == "[]", result.stdout


# ---------------------------------------------------------------- the stream, against a fake broker


@pytest.mark.asyncio
async def test_the_link_reconnects_with_its_generation_and_stops_on_a_refusal(monkeypatch):
    from websockets.asyncio.server import ServerConnection, serve

    monkeypatch.setattr(link, "BACKOFF_FIRST", 0.01)
    upgrades: list[dict[str, str]] = []
    replies: list[dict[str, Any]] = []

    def welcome_frame(bootstrap: bool) -> str:
        return json.dumps(
            {
                "type": "welcome",
                "event_version": frames.EVENT_VERSION,
                "generation": 7,
                "bootstrap": bootstrap,
                "agent_id": "beta",
                "lobby_id": "team",
                "runtime_id": "r",
            }
        )

    async def broker(socket: ServerConnection) -> None:
        assert socket.request is not None
        upgrades.append({k.lower(): v for k, v in socket.request.headers.raw_items()})
        if len(upgrades) == 1:
            await socket.send(welcome_frame(True))
            await socket.close(1011)  # a broker failure: the bridge comes back
        elif len(upgrades) == 2:
            await socket.send(welcome_frame(False))
            await socket.send(json.dumps(notice("n-9", "messages", [9])))
            replies.extend([json.loads(await socket.recv()), json.loads(await socket.recv())])
            await socket.close(1001)
        else:
            await socket.send(
                json.dumps(
                    {"type": "error", "status": 426, "code": "bridge_outdated", "message": "update"}
                )
            )
            await socket.close(4426)

    async with serve(broker, "127.0.0.1", 0) as server:
        port = server.sockets[0].getsockname()[1]
        host, fake = FakeHost(), FakeBroker()
        config = AgentConfig(Path("/x"), f"http://127.0.0.1:{port}", "plt_x", "team", "beta")
        bridge = Bridge(config, Runtime("r", "conversation"), host, fake)  # type: ignore[arg-type]
        await asyncio.wait_for(link.Link(bridge, "plt_x").run(), 20)

    assert [u.get("x-pocolobby-generation") for u in upgrades] == [None, "7", "7"]
    assert all(
        u["authorization"] == "Bearer plt_x"
        and u["x-pocolobby-runtime"] == "r"
        and u["x-pocolobby-event-version"] == "5"
        and "origin" not in u
        for u in upgrades
    )
    assert replies == [
        {"type": "received", "notice_id": "n-9"},
        {"type": "host_written", "notice_id": "n-9"},
    ]
    assert bridge.stop == Stop("bridge_outdated", 426, "update")
    contents = [p["content"] for p in host.channel()]
    assert contents[0].startswith("PocoLobby headline.") and "update PocoLobby" in contents[1]


@pytest.mark.asyncio
async def test_a_push_over_72_kib_is_refused_with_a_log_line_and_the_link_keeps_going(caplog):
    from websockets.asyncio.server import ServerConnection, serve

    replies: list[dict[str, Any]] = []
    big = notice("n-big", "messages", [3, 4], payload={"text": "x" * (72 * 1024)})
    fits = notice("n-fits", "messages", [5], payload={"text": "y" * (70 * 1024)})
    assert len(json.dumps(fits)) < link.MAX_PUSH_BYTES < len(json.dumps(big))

    async def broker(socket: ServerConnection) -> None:
        await socket.send(
            json.dumps(
                {
                    "type": "welcome",
                    "event_version": frames.EVENT_VERSION,
                    "generation": 1,
                    "bootstrap": False,
                    "agent_id": "beta",
                    "lobby_id": "team",
                    "runtime_id": "r",
                }
            )
        )
        await socket.send(json.dumps(big))
        await socket.send(json.dumps(fits))
        replies.extend([json.loads(await socket.recv()), json.loads(await socket.recv())])
        await socket.send(
            json.dumps(
                {"type": "error", "status": 403, "code": "agent_disabled", "message": "done"}
            )
        )
        await socket.close(4403)

    async with serve(broker, "127.0.0.1", 0) as server:
        port = server.sockets[0].getsockname()[1]
        host, fake = FakeHost(), FakeBroker()
        config = AgentConfig(Path("/x"), f"http://127.0.0.1:{port}", "plt_x", "team", "beta")
        bridge = Bridge(config, Runtime("r", "conversation"), host, fake)  # type: ignore[arg-type]
        with caplog.at_level("WARNING", logger="pocolobby.bridge.link"):
            await asyncio.wait_for(link.Link(bridge, "plt_x").run(), 20)

    # The oversized push was neither written nor confirmed; the next one was, on the same socket.
    assert replies == [
        {"type": "received", "notice_id": "n-fits"},
        {"type": "host_written", "notice_id": "n-fits"},
    ]
    assert not any("x" * 100 in p["content"] for p in host.channel())
    (line,) = [r.getMessage() for r in caplog.records if "refused a" in r.getMessage()]
    assert "notice n-big, messages [3, 4]" in line and "at most 73728 bytes" in line


@pytest.mark.asyncio
async def test_the_link_sends_a_heartbeat_frame_on_schedule(monkeypatch):
    monkeypatch.setattr(link, "HEARTBEAT_SECONDS", 0.01)

    class Socket:
        def __init__(self) -> None:
            self.sent: list[str] = []

        async def send(self, data: str) -> None:
            self.sent.append(data)

    socket = Socket()
    bridge, _, _ = make_bridge()
    beating = asyncio.ensure_future(link.Link(bridge, "t")._heartbeat(socket))  # type: ignore[arg-type]
    await asyncio.sleep(0.1)
    beating.cancel()
    assert len(socket.sent) >= 3 and {json.loads(s)["type"] for s in socket.sent} == {"heartbeat"}


@pytest.mark.asyncio
async def test_an_older_broker_without_continuity_gets_a_local_context(monkeypatch):
    monkeypatch.setattr(listing, "CATALOG_RETRY_DELAYS", ())
    missing = Outcome(status=404, code="unknown_tool", message="no operation named it")
    broker = FakeBroker([Outcome(data={"revision": "r", "tools": [_tool("send_message", "to")]})])
    broker.answers = {
        "get_context": missing,
        "save_checkpoint": missing,
        "get_messages": Outcome(
            data={
                "messages": [{"message_id": 4, "from": "a", "content": "body"}],
                "next_cursor": None,
            }
        ),
    }
    bridge, _, _ = make_bridge(broker)
    await bridge.refresh_catalog()
    welcome(bridge)
    context = await bridge.call_tool("get_context", {})
    data = json.loads(_text(context))
    assert not context.is_error and "does not serve get_context" in data["notice"]
    assert data["inbox"][0]["message_id"] == 4 and "content" not in data["inbox"][0]
    assert data["tool_guide"]["send_message"]["arguments"] == {"to": "required; The to"}
    assert data["bridge"]["runtime_scope"] == "conversation" and data["bridge"]["generation"] == 1
    saved = await bridge.call_tool("save_checkpoint", {"expected_revision": 0})
    assert saved.is_error and "Nothing was saved" in _text(saved)


# ---------------------------------------------------------------- what the bridge prints


def test_the_bridges_log_shows_controls_in_what_it_quotes_as_escapes():
    """Log lines quote the broker's errors, which may echo another party's text (issue 28)."""
    record = logging.makeLogRecord(
        {"msg": "refused: %s", "args": ("no agent \x1b]0;x\x07 \u202e\x9b6n",), "levelno": 30}
    )
    shown = TerminalSafeFormatter("%(message)s").format(record)
    assert shown == "refused: no agent \\x1b]0;x\\x07 \\u202e\\x9b6n"


def test_the_bridges_start_errors_show_controls_as_escapes(tmp_path: Path):
    missing = tmp_path / "no\x1b[6nconfig.json"
    result = subprocess.run(
        [sys.executable, "-m", "pocolobby", "bridge", "--config", str(missing)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert result.returncode == 1
    assert "no\\x1b[6nconfig.json" in result.stderr and "\x1b" not in result.stderr


def test_turn_edges_settle_before_they_count_and_are_dated_when_first_seen() -> None:
    busy, idle = "the agent is busy (no idle prompt)", None
    edges = TurnEdges(settle=2.0)
    assert edges.observe(busy, 10.0, 1000.0) is None  # first seen busy
    assert edges.observe(idle, 11.0, 1001.0) is None  # a flicker: back at the prompt
    assert edges.observe(busy, 12.0, 1002.0) is None
    assert edges.observe("the pane is in copy mode", 13.0, 1003.0) is None  # says nothing
    assert edges.observe(busy, 14.0, 1004.0) == ("start", 1002.0)  # held 2 s: dated at 12
    assert edges.observe(busy, 15.0, 1005.0) is None  # no repeat
    assert edges.observe(idle, 16.0, 1006.0) is None
    assert edges.observe(idle, 18.5, 1008.5) == ("end", 1006.0)
    assert [host_of(n) for n in ("codex-mcp-client", "gemini-cli-mcp-client", None)] == [
        "codex",
        "gemini",
        "shell",
    ]
    assert host_of("claude-code") == "claude-code" and host_of("codex", headless=True) == "shell"


def test_the_instructions_say_how_notices_arrive_in_each_delivery() -> None:
    channel, pane, off = (
        instructions_for(False),
        instructions_for(True),
        instructions_for(True, pushes_off=True),
    )
    assert "<channel" in channel and "# pocolobby:" not in channel
    assert '"# pocolobby:"' in pane and "<channel" not in pane and "get_messages" in pane
    assert "nothing arrives by itself" in off and "<channel" not in off
    for text in (channel, pane, off):
        assert "attributed input" in text and "acknowledge_messages" in text
