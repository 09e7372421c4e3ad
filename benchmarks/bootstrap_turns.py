"""Turns a session spends on bootstrap copies, with the old repeat rule and the current one.

    .venv/bin/python benchmarks/bootstrap_turns.py [--scale 0.02]

Runs the real bridge (`pocolobby.bridge.core.Bridge`) in-process against a fake broker and a
simulated Claude Code host that holds channel events while the session works (a turn is
running) and then shows every held copy, each as its own turn: so every bootstrap copy the
bridge writes before `ready` costs one turn, and the ideal is 1. The session's hooks run the
real `pocolobby hook` code (the turn file beside the configuration). Times are the seconds of
a real session multiplied by `--scale`, repeat pauses included, so a run takes a few seconds.

"before" is the rule of commit a47adb5 (repeat after 3, 6, 12, 24 and 48 s until `ready`,
skipping one repeat per get_context call), run by a subclass that restores it; "after" is
the bridge as it is. Scenarios:

- mid-tool-run: the session is in a 120 s tool run (its hook said a turn started) when the
  bootstrap arrives; then it calls get_context and, 5 s later, ready.
- get_context at 1 s: an idle session shown the bootstrap at once (its hook says a turn
  started), get_context after 1 s, then 60 s of reconciliation before ready.
- never answers: no turn, no tool call; every copy is written (the repeats kept for it).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from lobbies.wire import frames as wire_frames  # noqa: E402
from lobbies.wire.jsontext import JSONObject  # noqa: E402
from pocolobby import agent_reports  # noqa: E402
from pocolobby.bridge import notices  # noqa: E402
from pocolobby.bridge.broker import Outcome  # noqa: E402
from pocolobby.bridge.config import Runtime, derive_runtime_id, load_config  # noqa: E402
from pocolobby.bridge.core import Bridge  # noqa: E402
from pocolobby.bridge.host import HostGone  # noqa: E402

SESSION = "bench-session"
OLD_DELAYS = (3.0, 6.0, 12.0, 24.0, 48.0)


class OldNotices(notices.Notices):
    """The repeat rule before issue 43, as notices.py had it (a47adb5)."""

    context_calls = 0

    async def _repeat_bootstrap(self, nonce: str, params: JSONObject, calls: int | None) -> None:
        seen = self.context_calls
        for delay in notices.BOOTSTRAP_REPEAT_DELAYS:
            await asyncio.sleep(delay)
            if self._bootstrap_answered(nonce):
                return
            if self.context_calls != seen:
                seen = self.context_calls  # the model is acting on it: give it time
                continue
            try:
                await self.host.notify(notices.CHANNEL_METHOD, params)
            except HostGone:
                return


class OldRule(Bridge):
    """The bridge with the old repeat rule, counting get_context calls for it."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.notices.__class__ = OldNotices  # the same writer, with the old repeats

    async def _get_context(self, arguments: JSONObject) -> Any:
        assert isinstance(self.notices, OldNotices)
        self.notices.context_calls += 1
        return await super()._get_context(arguments)


class ClaudeHost:
    """Counts the bootstrap copies written to the session: each is a turn, held or not."""

    def __init__(self) -> None:
        self.copies = 0

    async def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        if method == notices.CHANNEL_METHOD and params and '"nonce"' in params["content"]:
            self.copies += 1


class Broker:
    generation: int | None = None
    runtime_id = "bench"

    async def catalog(self) -> Outcome:
        return Outcome(data={"revision": "r1", "tools": []})

    async def call(self, name: str, arguments: dict[str, Any]) -> Outcome:
        return Outcome(data={"ok": True, "acknowledged": []})


def bootstrap_frame() -> dict[str, Any]:
    return {
        "type": "notice",
        "event_version": wire_frames.EVENT_VERSION,
        "notice_id": "boot",
        "notice_kind": "bootstrap",
        "generation": 1,
        "as_of": "2026-12-05T00:00:00.000Z",
        "message_ids": [],
        "count": 0,
        "truncated": False,
        "content": 'PocoLobby bootstrap.\n{"nonce": "n1"}',
        "meta": {"priority": "important", "scope": "bootstrap"},
        "extensions": {},
    }


async def session(kind: type[Bridge], config_path: Path, scenario: str, scale: float) -> int:
    """One session under `scenario`; the bootstrap copies written until ready (or the end)."""
    config = load_config(config_path)

    def hook(event: str) -> None:
        stdin = json.dumps({"hook_event_name": event, "session_id": SESSION})
        agent_reports.hook(str(config_path), stdin)

    hook("Stop")  # no turn left open by the previous session
    host = ClaudeHost()
    runtime = Runtime(derive_runtime_id(config.token, SESSION), "conversation")
    bridge = kind(config, runtime, host, Broker())  # type: ignore[arg-type]
    bridge.on_welcome(
        {
            "type": "welcome",
            "event_version": wire_frames.EVENT_VERSION,
            "generation": 1,
            "bootstrap": True,
            "agent_id": "beta",
            "lobby_id": "team",
            "runtime_id": runtime.runtime_id,
        }
    )

    async def frames(frame: Any) -> None:
        return None

    async def wait(seconds: float) -> None:
        await asyncio.sleep(seconds * scale)

    if scenario == "mid-tool-run":
        hook("UserPromptSubmit")  # the turn that runs the long tool
        await bridge.notices.on_notice(wire_frames.parse_notice(bootstrap_frame()), frames)
        await wait(120)  # the tool run: Claude holds every copy meanwhile
        hook("Stop")
        hook("UserPromptSubmit")  # the bootstrap's turn
        await bridge.call_tool("get_context", {})
        await wait(5)
        await bridge.call_tool("ready", {"nonce": "n1"})
    elif scenario == "get_context at 1 s":
        await bridge.notices.on_notice(wire_frames.parse_notice(bootstrap_frame()), frames)
        hook("UserPromptSubmit")  # the bootstrap's turn
        await wait(1)
        await bridge.call_tool("get_context", {})
        await wait(60)  # reconciliation: reads, checks, notes
        await bridge.call_tool("ready", {"nonce": "n1"})
    else:
        await bridge.notices.on_notice(wire_frames.parse_notice(bootstrap_frame()), frames)
        await wait(sum(OLD_DELAYS) + 10)
    if bridge.notices._repeater is not None:
        bridge.notices._repeater.cancel()
    hook("Stop")
    return host.copies


async def run(scale: float) -> None:
    notices.BOOTSTRAP_REPEAT_DELAYS = tuple(d * scale for d in OLD_DELAYS)
    with tempfile.TemporaryDirectory(prefix="pocolobby-boot-") as raw:
        path = Path(raw) / "beta.json"
        body = {"url": "http://127.0.0.1:9", "token": "plt_x", "lobby": "team", "agent": "beta"}
        path.write_text(json.dumps(body))
        path.chmod(0o600)
        print(f"bootstrap copies written to the session (each a turn; ideal 1), scale {scale}")
        print(f"{'scenario':<22} {'before':>6} {'after':>6}")
        for scenario in ("mid-tool-run", "get_context at 1 s", "never answers"):
            before = await session(OldRule, path, scenario, scale)
            after = await session(Bridge, path, scenario, scale)
            print(f"{scenario:<22} {before:>6} {after:>6}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=0.02)
    asyncio.run(run(parser.parse_args().scale))


if __name__ == "__main__":
    main()
