"""Turns and token counts this bridge reports for a host without Claude Code's hooks: what
`pocolobby hook` posts for Claude Code, read off the pane (pane.watch_turns) and Codex's files.
"""

from __future__ import annotations

import asyncio
import os
from datetime import UTC, datetime

from lobbies.wire.jsontext import JSONObject
from pocolobby.bridge.broker import BrokerClient
from pocolobby.bridge.codex_tokens import codex_home, token_reports
from pocolobby.bridge.stream import log


async def report_turn(broker: BrokerClient, host: str, event: str, at: float) -> None:
    """A turn seen in the pane (pane.watch_turns), reported as Claude Code's hooks report
    theirs (POST /v1/turns): the broker keeps it as the agent's activity and a stretch of
    work. A report that fails is logged and not retried: the next edge corrects the state."""
    moment = datetime.fromtimestamp(at, UTC).isoformat(timespec="milliseconds")
    body: JSONObject = {"event": event, "at": moment, "host": host}
    outcome = await broker.request("POST", "/v1/turns", body)
    if not outcome.ok:
        log.info("turn %s not reported: %s", event, outcome.message or outcome.status)
    if host == "codex" and event == "end":
        await report_codex_tokens(broker)


async def report_codex_tokens(broker: BrokerClient) -> None:
    """After a Codex turn, its sessions' token counts from Codex's own files, as the Stop
    hook sends Claude Code's (PUT /v1/tokens); a failure waits for the next turn."""
    home = codex_home(os.environ)
    bodies = await asyncio.to_thread(token_reports, home, os.getcwd())
    for tokens in bodies:
        sent = await broker.request("PUT", "/v1/tokens", tokens)
        if not sent.ok:
            log.info("token counts not reported: %s", sent.message or sent.status)
            return
