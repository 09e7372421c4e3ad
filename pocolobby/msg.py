"""`pocolobby msg`: the broker's tools from a shell, for an agent that can run commands but has
no MCP (Codex CLI, Gemini CLI, aider, a script).

Each subcommand is one tool call through `POST /v1/tools/<name>` with the agent's token, the
same path the bridge uses, so arguments, validation, idempotency and answers are the tools'.
The exit codes, and what the caller may conclude from each, are in `pocolobby msg --help`
(pocolobby/cli/messages.py); 141 means the output's reader left (`| head`), and a send stands.

What another party wrote is printed terminal-safe: controls and escape sequences are shown as
their escapes (`\\x1b[6n`), never sent raw; `--json` decodes to the exact text.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import uuid
from dataclasses import dataclass
from typing import Any, TextIO

import mcp_types as types

from lobbies.wire.errors import ErrorCode
from lobbies.wire.jsontext import JSONObject

# Every field of an answer is another party's text (a peer's message and name, an operator's
# role, a broker's error echoing input): printed through these, never raw (issue 28).
from lobbies.wire.terminal import for_terminal as shown
from lobbies.wire.terminal import json_for_terminal
from pocolobby.agent_reports import config_path
from pocolobby.bridge import attachments
from pocolobby.bridge.broker import BrokerClient, Outcome
from pocolobby.bridge.config import AgentConfig, ConfigError, load_config, runtime_for
from pocolobby.bridge.files import FileRefused, LocalFile, Places


@dataclass(frozen=True)
class Where:
    """The configuration a command ran with, for its failure lines."""

    path: str
    url: str


EXIT_OK = 0
EXIT_USAGE = 1
EXIT_REFUSED = 2
EXIT_UNKNOWN = 3

# 507 recipient_capacity is a 5xx that API.md documents as a decided refusal (nothing stored),
# and so is 503 restore_mode (agents are refused before anything is read); every other 5xx may
# come from a proxy or a crash mid-request, so it is unknown.
_DECIDED_5XX = frozenset({507})
_DECIDED_CODES = frozenset({ErrorCode.RESTORE_MODE})


def new_request_id() -> str:
    """A fresh client_request_id within the tools' pattern (printable ASCII, no space)."""
    return f"msg-{uuid.uuid4().hex}"


def exit_code(outcome: Outcome) -> int:
    if outcome.ok:
        return EXIT_OK
    if outcome.transport is not None or outcome.status is None:
        return EXIT_UNKNOWN
    if outcome.status < 500 and outcome.code != "invalid_answer":
        return EXIT_REFUSED
    if outcome.status in _DECIDED_5XX or outcome.code in _DECIDED_CODES:
        return EXIT_REFUSED
    return EXIT_UNKNOWN


# ---------------------------------------------------------------- arguments per subcommand


def _read_content(raw: str, stdin: TextIO) -> str:
    """`-` reads the message from standard input, so long or multi-line text needs no quoting."""
    return stdin.read() if raw == "-" else raw


def send_arguments(args: argparse.Namespace, stdin: TextIO) -> JSONObject:
    """send_message's arguments: only what was given, so the broker applies its own defaults."""
    arguments: JSONObject = {
        "to": args.to,
        "content": _read_content(args.content, stdin),
        "client_request_id": args.request_id,
    }
    optional = {
        "kind": args.kind,
        "priority": args.priority,
        "reply_expected": args.reply_expected,
        "reply_to": args.reply_to,
        "correlation_id": args.correlation_id,
        "deliver_at": args.deliver_at,
        "supersedes": args.supersedes,
    }
    arguments.update({key: value for key, value in optional.items() if value is not None})
    if args.fields is not None:
        arguments["fields"] = args.fields
    if args.notify_when_seen:
        arguments["notify_when_seen"] = True
    return arguments


def _page_arguments(args: argparse.Namespace, view: str) -> JSONObject:
    arguments: JSONObject = {"view": view}
    for key in ("query", "limit", "cursor"):
        value = getattr(args, key, None)
        if value is not None:
            arguments[key] = value
    return arguments


def call_for(args: argparse.Namespace, stdin: TextIO) -> tuple[str, JSONObject]:
    """The tool and its arguments for one `msg` subcommand."""
    command = args.msg_command
    if command == "send":
        return "send_message", send_arguments(args, stdin)
    if command in ("inbox", "history"):
        return "get_messages", _page_arguments(args, command)
    if command == "ack":
        return "acknowledge_messages", {"message_ids": args.message_ids}
    if command == "context":
        return "get_context", {} if args.cursor is None else {"cursor": args.cursor}
    if command == "status":
        return "set_status", {"status": args.text}
    if command == "ready":
        return "ready", {"nonce": args.nonce}
    if command == "requests":
        return "set_owner_requests", {"count": args.count, "line": args.line}
    raise ValueError(f"unknown msg command {command!r}")


# ---------------------------------------------------------------- text output


def _message_lines(message: dict[str, Any]) -> list[str]:
    """A head line of one-line fields, then the content indented: a line break in a field is
    shown as `\\n`, so no field can start a line that looks like another message."""
    to = f" -> {shown(message['to'])}" if message.get("to") else ""
    tags = [shown(message.get(key)) for key in ("kind",) if message.get(key)]
    if message.get("priority") == "important":
        tags.append("important")
    if message.get("reply_expected"):
        tags.append("reply expected")
    if message.get("reply_to"):
        tags.append(f"reply to #{shown(message['reply_to'])}")
    head = (
        f"#{shown(message.get('message_id'))} {shown(message.get('created_at', ''))} "
        f"{shown(message.get('from'))}{to}"
    )
    if tags:
        head += f" [{', '.join(tags)}]"
    # A header (the inbox summary, uncertain receipts past the first five) has no body.
    body = shown(message["content"], multiline=True) if "content" in message else None
    files = [
        f"    attachment {shown(item.get('id'))}: {json_for_terminal(str(item.get('name', '')))} "
        f"({shown(item.get('media_type', '?'))}, {shown(item.get('size', '?'))} bytes)"
        for item in message.get("attachments") or []
        if isinstance(item, dict)
    ]
    text = [f"    {line}" for line in _lines(body)] if body is not None else []
    return [head, *text, *files]


def _lines(text: str) -> list[str]:
    """As str.splitlines, for text whose only line break left is `\\n`."""
    return (text[:-1] if text.endswith("\n") else text).split("\n")


def _ids(values: Any) -> str:
    return ", ".join(shown(value) for value in values or []) or "none"


def render_text(command: str, data: dict[str, Any], request_id: str | None) -> str:
    """The readable form of one answer; `--json` prints the answer itself instead."""
    if command == "send":
        recipients = ", ".join(
            f"{shown(r.get('agent_id'))} ({shown(r.get('delivery_state'))})"
            for r in data.get("recipients", [])
        )
        verb = "already stored (a retry)" if data.get("duplicate") else "stored"
        return (
            f"message {shown(data.get('message_id'))} {verb} for {recipients or 'no one'}\n"
            f"request id: {shown(request_id)}"
        )
    if command in ("inbox", "history"):
        messages = data.get("messages") or []
        lines = [line for message in messages for line in _message_lines(message)]
        if not messages:
            lines.append("no pending messages" if command == "inbox" else "no messages")
        elif command == "inbox":
            ids = " ".join(shown(m.get("message_id")) for m in messages)
            lines.append(f"acknowledge when handled: pocolobby msg ack {ids}")
        if data.get("next_cursor"):
            lines.append(f"more: --cursor {shown(data['next_cursor'])}")
        return "\n".join(lines)
    if command == "ack":
        return (
            f"acknowledged: {_ids(data.get('acknowledged'))}\n"
            f"unknown: {_ids(data.get('unknown_message_ids'))}\n"
            f"held: {_ids(data.get('held_message_ids'))}\n"
            f"receipt sequence: {shown(data.get('receipt_sequence'))}"
        )
    if command == "status":
        status = data.get("status")
        return f"status: {shown(status)}" if status else "status cleared"
    if command == "ready":
        return "ready: the broker knows this session loaded its context"
    if command == "requests":
        count = data.get("count") or 0
        if not count:
            return "owner requests cleared"
        return f"waiting on the owner for {shown(count)}: {shown(data.get('line'))}"
    return render_context(data)


def _restored_lines(restored: Any) -> list[str]:
    """The restore warning, first: a shell agent must learn its last work is uncertain."""
    if not isinstance(restored, dict):
        return []
    return [
        f"RESTORED: this broker was restored from a backup taken at "
        f"{shown(restored.get('backup_taken_at') or 'an unknown time')} (restored at "
        f"{shown(restored.get('restored_at') or '?')}).",
        f"  uncertain messages: {_ids(restored.get('uncertain_message_ids'))}: you, or an "
        "earlier session, may already have acted on them; check your work before repeating "
        "any of it.",
        *(f"  {line}" for line in _lines(shown(str(restored.get("note") or ""), multiline=True))),
    ]


def _checkpoint_lines(checkpoint: Any) -> list[str]:
    if not isinstance(checkpoint, dict):
        return ["checkpoint: none"]
    saved = (
        f"checkpoint: revision {shown(checkpoint.get('revision'))}, saved "
        f"{shown(checkpoint.get('saved_at'))} ({shown(checkpoint.get('age_seconds'))} s ago) "
        f"by generation {shown(checkpoint.get('saved_by_generation'))}, covers receipts "
        f"through {shown(checkpoint.get('covers_receipts_through'))}"
    )
    body = json_for_terminal(checkpoint.get("checkpoint"), indent=2)
    return [saved, *(f"    {line}" for line in _lines(body))]


def _uncertain_lines(uncertain: dict[str, Any]) -> list[str]:
    lines = [
        f"uncertain (acknowledged after the checkpoint): {shown(uncertain.get('total', 0))}"
        f", receipts covered through {shown(uncertain.get('covered_through'))}"
    ]
    for message in uncertain.get("messages") or []:
        lines += [f"  {line}" for line in _message_lines(message)]
    headers = uncertain.get("headers") or []
    if headers:
        lines.append(f"  more, without bodies: {_ids(h.get('message_id') for h in headers)}")
    if uncertain.get("next_cursor"):
        lines.append(f"  more: --cursor {shown(uncertain['next_cursor'])}")
    return lines


def render_context(data: dict[str, Any]) -> str:
    """Everything `--json` says, the restore warning first."""
    inbox = data.get("inbox") or {}
    runtime = data.get("runtime") or {}
    broker = data.get("broker") or {}
    lines = [
        *_restored_lines(data.get("restored")),
        f"agent {shown(data.get('agent_id'))} in lobby {shown(data.get('lobby_id'))}",
        f"runtime: {shown(runtime.get('runtime_id') or 'none')}, generation "
        f"{shown(runtime.get('generation'))}, ready {'yes' if runtime.get('ready') else 'no'}, "
        f"loaded checkpoint revision {shown(runtime.get('loaded_checkpoint_revision') or 'none')}",
        f"receipt sequence: {shown(data.get('receipt_sequence'))}",
        f"inbox: {shown(inbox.get('pending', 0))} pending "
        f"({shown(inbox.get('important', 0))} important)"
        + (
            f", oldest {shown(inbox['oldest_pending_at'])}"
            if inbox.get("oldest_pending_at")
            else ""
        ),
        *(f"  {line}" for m in inbox.get("first") or [] for line in _message_lines(m)),
        *_checkpoint_lines(data.get("checkpoint")),
        *_uncertain_lines(data.get("uncertain") or {}),
    ]
    role = shown(str(data.get("role") or "").strip(), multiline=True)
    if role:
        lines += ["role:", *(f"    {line}" for line in _lines(role))]
    lines += [f"- {shown(line)}" for line in data.get("guidance") or []]
    tools = (data.get("tool_guide") or {}).get("tools") or []
    if tools:
        lines.append("tools (`pocolobby msg --help` for the shell's):")
        lines += [f"  {shown(t.get('name'))}: {shown(t.get('purpose'))}" for t in tools]
    if broker:
        lines.append(
            f"broker: {shown(broker.get('host'))} version {shown(broker.get('version'))}, "
            f"incarnation {shown(broker.get('incarnation'))}"
        )
    return "\n".join(lines)


# The agent's own next step for a refusal it cannot fix by changing its arguments.
_NEXT_STEP: dict[str, str] = {
    ErrorCode.INVALID_TOKEN: "the token in {config} is not one this broker knows (rotated, or "
    "another broker's): ask the operator for a new configuration file",
    ErrorCode.TOKEN_REVOKED: "the operator rotated this agent's token: ask for the new "
    "configuration file",
    ErrorCode.AGENT_DISABLED: "the operator disabled this agent: ask them to enable it",
}


def render_failure(
    outcome: Outcome, code: int, request_id: str | None, command: str, config: Where
) -> str:
    """One line an agent can act on: what failed, at which broker, and what to do next."""
    retry = f"; retry with --request-id {shown(request_id)}" if request_id else ""
    message, error_code = shown(outcome.message), shown(outcome.code)
    check = f"`pocolobby doctor --config {shown(config.path)}` checks the whole path"
    if code == EXIT_REFUSED:
        stored = "; nothing stored" if request_id else ""
        step = _NEXT_STEP.get(outcome.code or "")
        after = f"; {step.format(config=shown(config.path))}, then {check}" if step else ""
        return f"refused ({outcome.status} {error_code}): {message}{stored}{after}"
    if outcome.transport == "not_sent":
        nothing = "nothing was sent" if command == "send" else "nothing was read or changed"
        return (
            f"the broker at {shown(config.url)} was not reached ({message}): {nothing}; is it "
            f"running, and is that its address? {check}{retry}"
        )
    what = f"{outcome.status} {error_code}: " if outcome.status else ""
    may = "the message may have been stored" if request_id else "no answer"
    return f"outcome unknown from {shown(config.url)} ({what}{message}): {may}{retry}"


def failure_json(outcome: Outcome, code: int) -> JSONObject:
    error = dict(outcome.error) or {"code": outcome.code, "message": outcome.message}
    return {
        "outcome": "refused" if code == EXIT_REFUSED else "unknown",
        "status": outcome.status,
        "transport": outcome.transport,
        "error": error,
    }


# ---------------------------------------------------------------- the command


async def _call(
    url: str, token: str, tool: str, arguments: JSONObject, files: list[LocalFile]
) -> Outcome | types.CallToolResult:
    """One tool call; with files, the bridge's own describe, upload-what-is-missing, repeat."""
    # No runtime headers: a shell command is no bound runtime, as a tool call without a stream.
    client = BrokerClient(url, token, runtime_for(token).runtime_id)
    try:
        if files:
            return await attachments.send_with_files(client, client.call, tool, arguments, files)
        return await client.call(tool, arguments)
    finally:
        await client.aclose()


def read_files(paths: list[str], config: AgentConfig) -> list[LocalFile]:
    """`--attach` paths under the bridge's local file rules (relative ones from here)."""
    listed = attachments.parse_paths([os.path.abspath(p) for p in paths])
    return attachments.read_all(listed, Places.current(config.identity))


def run(
    args: argparse.Namespace,
    *,
    stdin: TextIO = sys.stdin,
    stdout: TextIO = sys.stdout,
    stderr: TextIO = sys.stderr,
) -> int:
    """Run one `msg` subcommand; prints the answer (or why not) and returns the exit code."""
    try:
        path = config_path(args.config)
        config = load_config(path)
    except ConfigError as exc:
        print(f"pocolobby: {shown(exc)}", file=stderr)
        return EXIT_USAGE
    command = args.msg_command
    if command == "send" and args.request_id is None:
        args.request_id = new_request_id()
    request_id = args.request_id if command == "send" else None
    tool, arguments = call_for(args, stdin)
    try:
        files = read_files(args.attach, config) if getattr(args, "attach", None) else []
    except attachments.BadArguments as exc:
        print(f"pocolobby: not sent: {shown(exc)}", file=stderr)
        return EXIT_USAGE
    except FileRefused as refusal:
        print(f"pocolobby: {shown(attachments.refused_text('send', refusal))}", file=stderr)
        return EXIT_REFUSED
    outcome = asyncio.run(_call(config.url, config.token, tool, arguments, files))
    if isinstance(outcome, types.CallToolResult):  # an upload the broker did not take
        text = " ".join(c.text for c in outcome.content if isinstance(c, types.TextContent))
        print(f"pocolobby: {shown(text)}", file=stderr)
        return EXIT_REFUSED
    code = exit_code(outcome)
    if code == EXIT_OK:
        data = dict(outcome.data or {})
        if args.json:
            if request_id:
                data["client_request_id"] = request_id
            print(json_for_terminal(data), file=stdout)
        else:
            print(render_text(command, data, request_id), file=stdout)
        if command == "ack" and data.get("unknown_message_ids"):
            others = _ids(data["unknown_message_ids"])
            print(
                f"pocolobby: not acknowledged, not pending for you: {others} (the rest were)",
                file=stderr,
            )
            return EXIT_REFUSED
        return code
    if args.json:
        answer = failure_json(outcome, code)
        if request_id:
            answer["client_request_id"] = request_id
        print(json_for_terminal(answer), file=stdout)
    where = Where(path, config.url)
    print(f"pocolobby: {render_failure(outcome, code, request_id, command, where)}", file=stderr)
    return code
