"""`pocolobby msg`'s arguments (running one loads `pocolobby.msg`, which brings the MCP types
and the HTTP client: every other command, and `pocolobby msg --help`, starts without them)."""

from __future__ import annotations

import argparse
from typing import Any

from lobbies.wire.jsontext import MAX_JSON_DEPTH, JSONObject, JsonTooDeep, load_json

DESCRIPTION = """\
Send, read and acknowledge messages as an agent, from any shell: one subcommand per tool, with
the agent's configuration (--config or $POCOLOBBY_CONFIG). Text others wrote is printed
terminal-safe; --json prints the broker's answer exactly.

Exit codes:
  0  the broker answered with a result
  1  the command could not start (no configuration, bad arguments)
  2  refused: nothing was stored (for `ack`: some ids were not yours to acknowledge)
  3  outcome unknown (broker unreachable, timeout, 5xx): retry a send with the printed
     --request-id and the broker answers the original
  141  the output's reader left (`| head`); a send stands
"""

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


def page_arguments(q: argparse.ArgumentParser) -> None:
    q.add_argument("--limit", type=int, help="at most this many messages")
    q.add_argument("--cursor", help="the next_cursor a previous page printed")


def add_parser(sub: Any) -> None:
    """`pocolobby msg …`: one subcommand per tool an agent without MCP needs."""
    p = sub.add_parser(
        "msg",
        help="send, read and acknowledge messages as an agent, without MCP",
        description=DESCRIPTION,
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
    q.add_argument(
        "--kind",
        choices=KINDS,
        help="what the message is (a question or request "
        "expects a reply unless --no-reply-expected)",
    )
    q.add_argument("--priority", choices=PRIORITIES, help="important is shown first (default info)")
    q.add_argument(
        "--reply-expected",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="whether you wait for an answer (needs --kind)",
    )
    q.add_argument("--reply-to", type=int, metavar="MESSAGE_ID", help="the message this answers")
    q.add_argument("--correlation-id", help="a thread id of yours, echoed on replies")
    q.add_argument("--fields", type=_fields, help="a JSON object: commit, files, evidence, …")
    q.add_argument(
        "--notify-when-seen",
        action="store_true",
        help="be told when the recipient acknowledges it",
    )
    q.add_argument("--deliver-at", metavar="TIME", help="ISO 8601 time to deliver at")
    q.add_argument(
        "--supersedes",
        type=int,
        metavar="MESSAGE_ID",
        help="one of your earlier messages this replaces (its unseen copies are held)",
    )
    q.add_argument(
        "--attach",
        action="append",
        metavar="PATH",
        help="a screenshot or document to send with it (repeat, up to 10), read under the "
        "bridge's local file rules (docs/AGENTS.md)",
    )

    q = command("inbox", "your pending messages, oldest first (get_messages view=inbox)")
    page_arguments(q)

    q = command("history", "messages you sent or received, newest first")
    q.add_argument("--query", help="only messages whose text contains this")
    page_arguments(q)

    q = command("ack", "acknowledge handled messages (acknowledge_messages)")
    q.add_argument(
        "message_ids", type=int, nargs="+", metavar="MESSAGE_ID", help="ids from your inbox"
    )

    q = command("context", "your role, checkpoint, inbox summary and guidance (get_context)")
    q.add_argument("--cursor", help="the uncertain receipts' next_cursor")

    q = command("status", "set the one line peers see beside you; '' clears it (set_status)")
    q.add_argument("text", help="what you are doing, in one line")

    q = command(
        "requests",
        "say what you wait on from the owner, shown in their Waiting for you; 0 clears it "
        "(set_owner_requests)",
    )
    q.add_argument("count", type=int, help="how many things you wait on (0-99; 0 clears)")
    q.add_argument("line", nargs="?", default="", help="what they are, in one line")

    q = command("ready", "echo a bootstrap's nonce after reading your context (ready)")
    q.add_argument("nonce", help="the nonce the bootstrap notice gave")
    p.set_defaults(func=msg_cmd)
