"""`pocolobby msg`'s arguments. Running one loads `pocolobby.msg`, which brings the MCP types
and the HTTP client: every other command, and `pocolobby msg --help`, starts without them."""

from __future__ import annotations

import argparse
from typing import Any

from lobbies.wire import MAX_JSON_DEPTH, JSONObject, JsonTooDeep, load_json

KINDS = ("request", "notice", "assignment", "report", "question")
PRIORITIES = ("info", "important")


def msg_cmd(args: argparse.Namespace) -> int:
    # local: the MCP types take most of a command's start-up, and only `msg` needs them
    from pocolobby.msg import run

    return run(args)


def _fields(raw: str) -> JSONObject:
    try:
        value = load_json(raw, MAX_JSON_DEPTH, "--fields")
    except JsonTooDeep as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    except ValueError:
        raise argparse.ArgumentTypeError("--fields must be a JSON object") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("--fields must be a JSON object")
    return value


def add_parser(sub: Any) -> None:
    """`pocolobby msg …`: one subcommand per tool an agent without MCP needs."""
    p = sub.add_parser(
        "msg",
        help="send, read and acknowledge messages as an agent, without MCP",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    msub = p.add_subparsers(dest="msg_command", required=True)

    def command(name: str, help_text: str) -> argparse.ArgumentParser:
        q: argparse.ArgumentParser = msub.add_parser(name, help=help_text)
        q.add_argument("--config", help="the agent's configuration file (or $POCOLOBBY_CONFIG)")
        q.add_argument("--json", action="store_true", help="print the broker's answer as JSON")
        return q

    q = command("send", "send one message (send_message)")
    q.add_argument("to", help="the recipient's agent id")
    q.add_argument("content", help="the message text, or - to read it from standard input")
    q.add_argument(
        "--request-id",
        help="the client_request_id; reuse the printed one to retry a send whose outcome is "
        "unknown (default: a new one)",
    )
    q.add_argument("--kind", choices=KINDS)
    q.add_argument("--priority", choices=PRIORITIES)
    q.add_argument("--reply-expected", action=argparse.BooleanOptionalAction, default=None)
    q.add_argument("--reply-to", type=int, metavar="MESSAGE_ID")
    q.add_argument("--correlation-id")
    q.add_argument("--fields", type=_fields, help="a JSON object: commit, files, evidence, …")
    q.add_argument("--notify-when-seen", action="store_true")
    q.add_argument("--deliver-at", metavar="TIME", help="ISO 8601 time to deliver at")
    q.add_argument("--supersedes", type=int, metavar="MESSAGE_ID")
    q.add_argument(
        "--attach",
        action="append",
        metavar="PATH",
        help="a screenshot or document to send with it (repeat, up to 10), read under the "
        "bridge's local file rules (docs/AGENTS.md)",
    )

    q = command("inbox", "your pending messages, oldest first (get_messages view=inbox)")
    q.add_argument("--limit", type=int)
    q.add_argument("--cursor")

    q = command("history", "messages you sent or received, newest first")
    q.add_argument("--query", help="only messages whose text contains this")
    q.add_argument("--limit", type=int)
    q.add_argument("--cursor")

    q = command("ack", "acknowledge handled messages (acknowledge_messages)")
    q.add_argument("message_ids", type=int, nargs="+", metavar="MESSAGE_ID")

    q = command("context", "your role, checkpoint, inbox summary and guidance (get_context)")
    q.add_argument("--cursor", help="the uncertain receipts' next_cursor")

    q = command("status", "set the one line peers see beside you; '' clears it (set_status)")
    q.add_argument("text")

    q = command("ready", "echo a bootstrap's nonce after reading your context (ready)")
    q.add_argument("nonce")
    p.set_defaults(func=msg_cmd)
