"""Tool results as the model reads them: broker answers, refusals and the stopped stream.

Every sentence says what happened to the call (stored, not sent, or unknown) and what to do
next, because the model acts on this text alone.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import mcp_types as types

from lobbies.wire.errors import ErrorCode
from lobbies.wire.frames import EVENT_VERSION
from lobbies.wire.jsontext import JSONObject, JSONValue
from pocolobby.bridge.broker import Outcome


@dataclass(frozen=True)
class Stop:
    """Why the stream stopped for good in this process: the broker's code and words."""

    code: str
    status: int | None
    message: str


def as_text(data: JSONValue) -> str:
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


def success(data: JSONValue) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=as_text(data))])


def failure(text: str, details: JSONObject | None = None) -> types.CallToolResult:
    body = text if details is None else f"{text}\n{as_text(details)}"
    return types.CallToolResult(content=[types.TextContent(type="text", text=body)], is_error=True)


def retry_advice(arguments: JSONObject) -> str:
    if "client_request_id" in arguments:
        return (
            "Retry with the same arguments and the same client_request_id: the broker "
            "recognizes a retry while the original is stored (about a day); for anything "
            "older, check your history (get_messages with view history) first."
        )
    return "Check the current state (for example with get_messages) before repeating it."


def render(
    name: str, arguments: JSONObject, outcome: Outcome, broker_url: str
) -> types.CallToolResult:
    """A broker answer as the model should read it."""
    if outcome.ok:
        return success(outcome.data)
    if outcome.transport == "not_sent":
        return failure(
            f"Not sent: {name} could not reach the PocoLobby broker at {broker_url} "
            f"({outcome.message}). Nothing was stored. Retry later with the same arguments"
            + (" and the same client_request_id." if "client_request_id" in arguments else ".")
        )
    if outcome.transport == "unknown":
        return failure(
            f"Outcome unknown: the connection to the broker failed after {name} was sent "
            f"({outcome.message}), so it may or may not have been applied. "
            + retry_advice(arguments)
        )
    status = outcome.status or 0
    if status >= 500:
        return failure(
            f"The broker failed on {name} ({status} {outcome.code}: {outcome.message}); the "
            f"outcome is unknown. {retry_advice(arguments)}",
            {"error": outcome.error} if outcome.error else None,
        )
    if outcome.code == ErrorCode.GENERATION_SUPERSEDED:
        return failure(
            f"PocoLobby refused {name} ({status} {outcome.code}): {outcome.message}. This "
            "bridge process no longer holds the agent's runtime (a newer process took over, "
            "or the owner reset it); get_context shows the state once the bridge has "
            "rechecked its stream.",
            {"error": outcome.error},
        )
    return failure(
        f"PocoLobby refused {name} ({status} {outcome.code}): {outcome.message}",
        {"error": outcome.error} if outcome.error else None,
    )


def stopped_text(stop: Stop, agent_id: str, lobby_id: str) -> str:
    """Why this process sends nothing, and the fix, in the words of the broker's refusal."""
    who = f"{agent_id} in lobby {lobby_id}"
    said = f" (the broker said: {stop.message})" if stop.message else ""
    if stop.code == ErrorCode.RUNTIME_CONFLICT:
        text = (
            f"Another conversation holds the agent {who}, so this session is not "
            "connected to PocoLobby and sends nothing yet. It waits to take over: when the "
            "owner taps Hand over on the lobby's dashboard or runs `pocolobby agent "
            f"hand-over {lobby_id} {agent_id}`, or the other conversation quits, this "
            "session is admitted within seconds and gets its bootstrap, without a restart."
        )
    elif stop.code == ErrorCode.RUNTIME_RETIRED:
        text = (
            f"The owner retired this conversation's binding to {who}; it cannot act for the "
            "agent again. A new conversation can be admitted by the owner."
        )
    elif stop.code == ErrorCode.GENERATION_SUPERSEDED:
        text = (
            f"A newer bridge process of this same conversation took over {who} (for "
            "example the conversation was resumed elsewhere); this process stopped and "
            "sends nothing. Reconnecting this bridge would take the agent back."
        )
    elif stop.code == ErrorCode.BRIDGE_OUTDATED:
        text = (
            "The broker speaks a newer event version than this bridge "
            f"({EVENT_VERSION}): update PocoLobby on this machine, then reconnect the "
            "bridge (/mcp, reconnect pocolobby)."
        )
    elif stop.status == 401 or stop.code == ErrorCode.TOKEN_REVOKED:
        text = (
            f"The broker refused this agent's token ({stop.code}); the owner may have "
            "rotated it. Ask for a new configuration file, then reconnect the bridge."
        )
    elif stop.code == ErrorCode.AGENT_DISABLED:
        text = (
            f"The owner disabled the agent {who}; the bridge stopped and sends nothing "
            "until the owner enables it and the bridge is reconnected."
        )
    elif stop.status == 403:
        text = (
            f"The owner closed this session's access to {who} ({stop.code}); the bridge "
            "stopped and sends nothing."
        )
    else:
        text = (
            f"The broker closed this bridge's stream for good ({stop.status} {stop.code}); "
            "it does not reconnect by itself."
        )
    return text + said
