"""The operator's commands over the admin API: lobbies, agents, accounts, attachments, status
and the settings link."""

from __future__ import annotations

import argparse
import io
import json
import uuid
from urllib.parse import quote, urlsplit

import segno

from lobbies.wire.jsontext import JSONObject, JSONValue
from lobbies.wire.terminal import for_terminal as shown
from pocolobby import config
from pocolobby.bridge.config import is_loopback
from pocolobby.cli.admin_client import (
    ConfigFile,
    broker_url,
    call,
    issue_into,
    read_role,
    segment,
    table,
)
from pocolobby.cli.common import CliError, Subparsers


def lobby_cmd(args: argparse.Namespace) -> int:
    if args.lobby_command == "create":
        call("POST", "/lobbies", {"name": args.name})
        print(f"created lobby {args.name}")
    elif args.lobby_command in ("pause", "resume"):
        paused = args.lobby_command == "pause"
        call("POST", f"/lobbies/{segment(args.name)}/delivery", {"paused": paused})
        print(
            f"delivery in {args.name} paused: sends queue, nothing is pushed until resume"
            if paused
            else f"delivery in {args.name} resumed"
        )
    elif args.lobby_command == "cancel-scheduled":
        data = call(
            "POST",
            f"/lobbies/{segment(args.name)}/cancel-scheduled",
            {"message_id": args.message_id},
        )
        print(f"scheduled message {data['message_id']}: {data['status']}")
    elif args.lobby_command in ("reply", "tell"):
        owner_message(args)
    elif args.lobby_command == "delete":
        call("DELETE", f"/lobbies/{segment(args.name)}")
        print(f"deleted lobby {args.name} and everything in it")
    else:
        data = call("GET", "/lobbies")
        print(
            json.dumps(data, indent=2)
            if args.json
            else table(data["lobbies"], ["name", "created_at"])
        )
    return 0


def owner_message(args: argparse.Namespace) -> None:
    """`lobby reply` answers an agent's question to the owner; `lobby tell` writes to an agent:
    the owner's message, as the dashboard's reply boxes send it."""
    body: dict[str, object] = {
        "content": args.text,
        "important": args.important,
        # One id per command: the broker stores the message once under it.
        "client_request_id": f"operator-{uuid.uuid4().hex}",
    }
    if args.lobby_command == "reply":
        body["reply_to"] = args.message_id
    else:
        body["to"] = args.agent
    data = call("POST", f"/lobbies/{segment(args.name)}/owner-messages", body)
    to, message = shown(str(data["to"])), data["message_id"]
    if data["reply_to"] is None:
        print(f"sent to {to} as the owner (message {message})")
        return
    print(f"answered {to}'s question {data['reply_to']} (message {message})")
    if data["answered_before"] is not None:
        print(f"  (you had answered it before, in message {data['answered_before']})")


AGENT_COLUMNS = ["agent_id", "enabled", "pending", "held", "last_message_at", "runtime_id"]


def agent_cmd(args: argparse.Namespace) -> int:
    command = args.agent_command
    base = f"/lobbies/{segment(args.lobby)}/agents"
    if command == "list":
        data = call("GET", base)
        print(json.dumps(data, indent=2) if args.json else table(data["agents"], AGENT_COLUMNS))
        return 0
    target = f"{base}/{segment(args.name)}"
    if command == "add":
        role = read_role(args.role_file) if args.role_file else ""
        config_file = ConfigFile(args.config, replace=False) if args.config else None
        body = {
            "agent_id": args.name,
            "description": args.description,
            "role": role,
            "manage_rooms": args.manage_rooms,
            "broadcast": args.broadcast,
        }
        if config_file is None:
            # The token answered here is never shown: redeeming the code revokes it.
            call("POST", base, body)
            print(f"added {args.name} to {args.lobby}")
            print_enrollment(args, target)
            return 0
        issue_into(config_file, "POST", base, body)
        print(
            f"added {args.name} to {args.lobby}; its configuration is in {config_file.path} "
            "(mode 0600)"
        )
    elif command == "enroll":
        print_enrollment(args, target)
    elif command == "rotate":
        config_file = ConfigFile(args.config, replace=True)
        issue_into(config_file, "POST", f"{target}/rotate")
        print(
            f"rotated {args.name}'s token; earlier tokens are revoked; new configuration in "
            f"{config_file.path} (mode 0600)"
        )
    elif command == "set-role":
        role = read_role(args.role_file)
        call("POST", f"{target}/role", {"role": role})
        print(f"set {args.name}'s role ({len(role)} characters); its next get_context shows it")
    elif command == "permissions":
        body = {
            "broadcast": None if args.broadcast is None else args.broadcast == "yes",
            "manage_rooms": None if args.manage_rooms is None else args.manage_rooms == "yes",
        }
        data = call("POST", f"{target}/permissions", body)
        print(
            f"{args.name}: broadcast {'yes' if data['broadcast'] else 'no'}, "
            f"manage_rooms {'yes' if data['manage_rooms'] else 'no'}"
        )
    elif command == "remove":
        call("DELETE", target)
        print(f"removed {args.name} from {args.lobby}")
    elif command == "hand-over":
        data = call("POST", f"{target}/hand-over")
        print(
            f"handed {args.name} over to the waiting conversation (runtime "
            f"{data['runtime_id']}); it is admitted and bootstraps within seconds. The "
            f"conversation that held it (runtime {data['retired_runtime_id'] or 'none'}) "
            "is retired and can no longer act for the agent."
        )
    else:
        data = call("POST", f"{target}/{command}")
        print(f"{command}: {args.name} " + json.dumps(data))
    return 0


def print_enrollment(args: argparse.Namespace, target: str) -> None:
    """Issue a one-time code for the agent and print the one command its machine runs."""
    url = enrollment_url(args)
    data = call("POST", f"{target}/enroll", {"expires_minutes": args.expires})
    show_enrollment(args.lobby, args.name, data["code"], data["expires_at"], url)
    explain_enrollment(url)


def enrollment_url(args: argparse.Namespace) -> str:
    """The broker's address as the agent's machine reaches it: `--url` or POCOLOBBY_URL."""
    return str(args.url or broker_url()).rstrip("/")


def show_enrollment(lobby: str, name: str, code: str, expires_at: str, url: str) -> None:
    """An issued code and the one command the agent's machine runs (`agent add --enroll`,
    `agent enroll`, `team apply`)."""
    print(
        f"enrolment code for {shown(name)} in {shown(lobby)}: one use, expires "
        f"{shown(expires_at)}. On the agent's machine, in the project it works in, run:"
    )
    print()
    print(f"  pocolobby join {shown(code)}@{shown(url)}")
    print()


def explain_enrollment(url: str) -> None:
    """What `pocolobby join` does and the address it was given; once after the codes."""
    print(
        "(add --host codex, gemini or shell for another host than Claude Code). It writes the "
        "agent's configuration there and sets the host up; the code is its only copy of the "
        "token, so send it privately."
    )
    if is_loopback(url):
        print(
            f"{shown(url)} is this machine's loopback address: for an agent on another machine, "
            "give the broker's address as it reaches it, `--url https://...`."
        )


# Each agent's connection and its pending and important (pending, priority important) counts.
STATUS_COLUMNS = [
    "agent_id",
    "enabled",
    "connected",
    "pending",
    "important",
    "held",
    "last_message_at",
    "runtime_id",
    "loaded_checkpoint_revision",
    "idle_seconds",
    "notification_attention_required",
    "transport",
]


# The default view fits 100 columns: short headings, idle as a duration, held notices in
# the held column; `--wide` shows STATUS_COLUMNS as the API names them.
NARROW_COLUMNS = ["agent", "on", "conn", "pending", "imp", "held", "idle", "attn", "via"]
AGENT_CHARS = 30


def _duration(seconds: int | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 2 * 3600:
        return f"{seconds // 60}m"
    if seconds < 2 * 86400:
        return f"{seconds // 3600}h"
    return f"{seconds // 86400}d"


def _yes(value: JSONValue) -> str:
    return "yes" if value else "no"


def _narrow(agent: JSONObject) -> dict[str, str]:
    """One agent's row of the default view; held counts held messages and says when the
    agent's notices are held too."""
    name = str(agent["agent_id"])
    if len(name) > AGENT_CHARS:
        name = name[: AGENT_CHARS - 1] + "…"
    held = str(agent.get("held") or 0)
    idle = agent.get("idle_seconds")
    if agent.get("notices_held"):
        held += "+notices"
    return {
        "agent": name,
        "on": _yes(agent.get("enabled")),
        "conn": _yes(agent.get("connected")),
        "pending": str(agent.get("pending") or 0),
        "imp": str(agent.get("important") or 0),
        "held": held,
        "idle": _duration(idle if isinstance(idle, int) else None),
        "attn": "YES" if agent.get("notification_attention_required") else "-",
        "via": str(agent.get("transport") or "-"),
    }


def _choice(value: str | None) -> bool | None:
    return None if value is None else value == "yes"


def account_cmd(args: argparse.Namespace) -> int:
    """Create or change a hosted broker's account through the serving broker (which holds the
    store's lock): enabled, may create lobbies, operator (its email code opens /admin/)."""
    body = {
        "email": args.email,
        "enabled": _choice(args.enabled),
        "may_create_lobbies": _choice(args.may_create_lobbies),
        "operator": _choice(args.operator),
    }
    data = call("POST", "/accounts", body)
    print(
        f"{'created' if data['created'] else 'changed'} account {data['email']}: enabled "
        f"{_yes(data['enabled'])}, may create lobbies {_yes(data['may_create_lobbies'])}, "
        f"operator {_yes(data['operator'])}"
        + ("; its email-code sign-in opens /admin/" if data["operator"] else "")
    )
    return 0


def status_cmd(args: argparse.Namespace) -> int:
    data = call("GET", "/status" + (f"?lobby={quote(args.lobby)}" if args.lobby else ""))
    if args.json:
        print(json.dumps(data, indent=2))
        return 0
    broker = data.get("broker") or {}
    if broker.get("restore_mode"):
        print(
            f"RESTORE MODE since {shown(broker['restored_at'])} "
            f"(from {shown(broker['restored_from'])}): "
            "agents are refused and dispatch is paused until `pocolobby restore --finish`"
        )
    for lobby in data["lobbies"]:
        print(f"lobby {shown(lobby['name'])}")
        if args.wide:
            print(table(lobby["agents"], STATUS_COLUMNS))
        else:
            print(table([_narrow(a) for a in lobby["agents"]], NARROW_COLUMNS))
        for agent in lobby["agents"]:
            waiting = agent.get("waiting")
            if waiting:
                print(
                    f"  a new conversation is waiting to take over {agent['agent_id']} since "
                    f"{shown(waiting['since'])} (runtime {shown(waiting['runtime_id'])}): "
                    f"pocolobby agent hand-over {lobby['name']} {agent['agent_id']}"
                )
            elif agent.get("runtime_released_at"):
                print(
                    f"  {agent['agent_id']}: its conversation ended at "
                    f"{agent['runtime_released_at']}; the next conversation takes it"
                )
            held = agent.get("notices_held")
            if held:  # the reason is the bridge's words, often a tmux error
                print(
                    f"  {shown(agent['agent_id'])}: {shown(agent['transport'])} notices held "
                    f"since {shown(held['since'])}: {shown(held['reason'] or 'no reason given')}"
                )
        for question in lobby.get("owner_questions", []):  # its opening is the agent's words
            print(
                f"  {shown(question['agent_id'])} asks you ({shown(question['kind'] or 'reply')}"
                f", message {question['message_id']}, since {shown(question['asked_at'])}): "
                f"{shown(question['opening'])}"
            )
            print(
                f"    answer: pocolobby lobby reply {shown(lobby['name'])} "
                f"{question['message_id']} '...'"
            )
    return 0


ATTACHMENT_COLUMNS = ["id", "name", "media_type", "size", "uploader", "messages", "expired_at"]


def attachments_cmd(args: argparse.Namespace) -> int:
    """The lobby's attachments, metadata and usage only: no command downloads content."""
    data = call("GET", f"/lobbies/{segment(args.lobby)}/attachments")
    if args.json:
        print(json.dumps(data, indent=2))
        return 0
    usage = data["usage"]
    print(
        f"lobby {shown(data['lobby'])}: {usage['content_bytes']} of {usage['quota_bytes']} "
        f"bytes of distinct content; {usage['attachments']} live, {usage['expired']} expired, "
        f"{usage['pending_uploads']} pending uploads"
    )
    print(table(data["attachments"], ATTACHMENT_COLUMNS))
    return 0


def settings_cmd(args: argparse.Namespace) -> int:
    """Print a one-minute, single-use link that opens this broker's pages as its operator.

    Printed, never handed to a browser: `webbrowser.open` starts the browser with the link in
    its command line, which every local user can read (docs/DECISIONS.md, "Hosts and local
    boundaries").
    """
    answer = call("POST", "/settings-ticket")
    ticket = answer["ticket"]
    origin = _public_origin(answer.get("public_origin"))
    if args.qr and not origin:
        raise CliError(
            "--qr needs the broker's public https origin: set POCOLOBBY_PUBLIC_ORIGIN where "
            '`pocolobby serve` runs (docs/OPERATIONS.md, "The dashboard on your phone")'
        )
    parts = urlsplit(broker_url())
    port = parts.port or config.DEFAULT_PORT
    print(
        "Open this link in a browser on this machine; it works once, for one minute "
        "(run `pocolobby settings` again for another):"
    )
    print(f"http://127.0.0.1:{port}/#ticket={ticket}")
    if not origin:
        return 0
    phone_link = f"{origin}/#ticket={ticket}"
    print(f"Or on your phone, through {origin} (the same one-time link: one browser, once):")
    if args.qr:
        print(qr_text(phone_link), end="")
    print(phone_link)
    return 0


def _public_origin(value: object) -> str:
    """The broker's public origin, checked again before it reaches the terminal."""
    if not value:
        return ""
    try:
        return config.parse_public_origin(str(value))
    except ValueError as error:
        raise CliError(f"the broker's public origin {shown(str(value))} {error}") from None


def qr_text(link: str) -> str:
    """`link` as a QR code of Unicode half blocks, two rows of modules per line: light
    modules drawn, for a dark terminal, with the quiet zone a scanner needs. Only block
    characters, spaces and newlines: nothing a terminal interprets."""
    buffer = io.StringIO()
    segno.make(link, error="m").terminal(out=buffer, compact=True, border=4)
    return buffer.getvalue()


def add_parsers(sub: Subparsers) -> None:
    """`lobby`, `agent`, `account`, `attachments`, `status` and `settings`."""
    _lobby_parser(sub)
    _agent_parser(sub)
    _account_parser(sub)
    _attachments_parser(sub)
    _status_parser(sub)
    _settings_parser(sub)


def _lobby_parser(sub: Subparsers) -> None:
    p = sub.add_parser(
        "lobby", help="create, list or delete lobbies; answer a question to the owner"
    )
    lsub = p.add_subparsers(dest="lobby_command", required=True)
    lobby_name = "the lobby's name (its address: lowercase letters, digits and -)"
    lsub.add_parser("create", help="create an empty lobby").add_argument("name", help=lobby_name)
    lsub.add_parser(
        "delete", help="delete a lobby with its agents, messages and rooms (no undo)"
    ).add_argument("name", help=lobby_name)
    lsub.add_parser("list", help="every lobby with its agent count").add_argument(
        "--json", action="store_true", help="print the broker's answer as JSON"
    )
    lsub.add_parser("pause", help="pause every push in the lobby (sends still queue)").add_argument(
        "name", help=lobby_name
    )
    lsub.add_parser("resume", help="resume the lobby's pushes").add_argument(
        "name", help=lobby_name
    )
    cancel = lsub.add_parser("cancel-scheduled", help="cancel any scheduled message by id")
    cancel.add_argument("name", help=lobby_name)
    cancel.add_argument("message_id", type=int, help="the scheduled message's id")
    reply = lsub.add_parser(
        "reply",
        help="answer an agent's question to the owner, as the owner (`pocolobby status` lists "
        "the questions waiting)",
    )
    reply.add_argument("name", help=lobby_name)
    reply.add_argument("message_id", type=int, help="the question's message id")
    reply.add_argument("text", help="the answer; the asker receives it from `owner`")
    tell = lsub.add_parser("tell", help="write to an agent as the owner, answering no question")
    tell.add_argument("name", help=lobby_name)
    tell.add_argument("agent", help="the agent's name")
    tell.add_argument("text", help="the message; the agent receives it from `owner`")
    for owner_parser in (reply, tell):
        owner_parser.add_argument(
            "--important",
            action="store_true",
            help="priority important: shown first, and counted as important in `status`",
        )
    p.set_defaults(func=lobby_cmd)


# The `pocolobby agent COMMAND LOBBY NAME` commands that take nothing else, and what each does.
_AGENT_ACTIONS = {
    "disable": "refuse the agent's tokens and hold its pending messages until `enable`; its "
    "session is released",
    "enable": "accept the agent's tokens again (messages held by `disable` stay held)",
    "reset-runtime": "retire the session bound to the agent (a dead or stuck one) so the next "
    "bridge to connect starts afresh; nothing is handed over",
    "hand-over": "give the agent to the conversation waiting for it, without restarting it; "
    "the bound one is retired (the dashboard's Hand over)",
    "remove": "delete the agent, its tokens and its inbox; messages it sent stay (no undo)",
    "rest": "push nothing to the agent until `resume`; its messages still queue",
    "resume": "end a rest: what queued is pushed again",
    "retry-notifications": "a fresh notification budget for its pending messages, now",
    "cancel-scheduled": "cancel every scheduled message and daily schedule the agent set",
}


def _agent_parser(sub: Subparsers) -> None:
    p = sub.add_parser("agent", help="provision and manage agents")
    asub = p.add_subparsers(dest="agent_command", required=True)
    lobby_help, name_help = "the agent's lobby", "the agent's name (its id in the lobby)"
    add = asub.add_parser("add", help="admit an agent and write its configuration file")
    add.add_argument("lobby", help=lobby_help)
    add.add_argument("name", help=name_help)
    how = add.add_mutually_exclusive_group(required=True)
    how.add_argument("--config", help="where to write the agent's JSON (0600), for scripts")
    how.add_argument(
        "--enroll",
        action="store_true",
        help="print a one-time code for `pocolobby join` on the agent's machine instead",
    )
    enroll_options(add)
    add.add_argument("--description", default="", help="one line peers see beside the agent")
    add.add_argument("--role-file", help="a file with the agent's role instructions")
    add.add_argument("--manage-rooms", action="store_true", help="it may create and edit rooms")
    add.add_argument("--broadcast", action="store_true", help="it may message every agent")
    enroll = asub.add_parser(
        "enroll",
        help="a one-time code for `pocolobby join` on the agent's machine (its token is "
        "replaced when the code is redeemed)",
    )
    enroll.add_argument("lobby", help=lobby_help)
    enroll.add_argument("name", help=name_help)
    enroll_options(enroll)
    lst = asub.add_parser("list", help="the lobby's agents, their state and permissions")
    lst.add_argument("lobby", help=lobby_help)
    lst.add_argument("--json", action="store_true", help="print the broker's answer as JSON")
    rot = asub.add_parser("rotate", help="revoke the agent's tokens and write a new configuration")
    rot.add_argument("lobby", help=lobby_help)
    rot.add_argument("name", help=name_help)
    rot.add_argument("--config", required=True, help="where to write the new JSON (0600)")
    role = asub.add_parser("set-role", help="replace the agent's role instructions from a file")
    role.add_argument("lobby", help=lobby_help)
    role.add_argument("name", help=name_help)
    role.add_argument("--role-file", required=True, help="the file with the new instructions")
    perms = asub.add_parser("permissions", help="grant or withdraw broadcast / manage_rooms")
    perms.add_argument("lobby", help=lobby_help)
    perms.add_argument("name", help=name_help)
    perms.add_argument("--broadcast", choices=("yes", "no"), help="may message every agent")
    perms.add_argument("--manage-rooms", choices=("yes", "no"), help="may create and edit rooms")
    for name, help_text in _AGENT_ACTIONS.items():
        q = asub.add_parser(name, help=help_text, description=help_text)
        q.add_argument("lobby", help=lobby_help)
        q.add_argument("name", help=name_help)
    p.set_defaults(func=agent_cmd)


def enroll_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--expires",
        type=int,
        default=15,
        metavar="MINUTES",
        help="the code's lifetime in minutes (default 15, at most 10080)",
    )
    parser.add_argument(
        "--url",
        help="the broker's address as the agent's machine reaches it (default $POCOLOBBY_URL)",
    )


def _account_parser(sub: Subparsers) -> None:
    p = sub.add_parser("account", help="a hosted broker's accounts: who may sign in, and as what")
    acsub = p.add_subparsers(dest="account_command", required=True)
    aset = acsub.add_parser(
        "set", help="create or change an account (unnamed options stay as they are)"
    )
    aset.add_argument("email", help="the address the account signs in with")
    aset.add_argument(
        "--operator",
        choices=("yes", "no"),
        help="yes: its email-code sign-in opens the Django admin (/admin/) on a hosted broker",
    )
    aset.add_argument("--enabled", choices=("yes", "no"), help="no: it cannot sign in")
    aset.add_argument(
        "--may-create-lobbies", choices=("yes", "no"), help="yes: it may create up to 3 lobbies"
    )
    p.set_defaults(func=account_cmd)


def _attachments_parser(sub: Subparsers) -> None:
    p = sub.add_parser("attachments", help="a lobby's attachment metadata and usage (no content)")
    p.add_argument("lobby", help="the lobby's name")
    p.add_argument("--json", action="store_true", help="print the broker's answer as JSON")
    p.set_defaults(func=attachments_cmd)


def _status_parser(sub: Subparsers) -> None:
    p = sub.add_parser("status", help="agents, inboxes and bindings per lobby")
    p.add_argument("lobby", nargs="?", help="one lobby (default: every lobby)")
    p.add_argument("--json", action="store_true", help="print the broker's answer as JSON")
    p.add_argument(
        "--wide", action="store_true", help="every column, as the API names them (over 100)"
    )
    p.set_defaults(func=status_cmd)


def _settings_parser(sub: Subparsers) -> None:
    p = sub.add_parser(
        "settings", help="print a one-minute link to this broker's dashboards and settings"
    )
    p.add_argument("--print", dest="print_only", action="store_true", help="(the default)")
    p.add_argument(
        "--qr",
        action="store_true",
        help="also print the public origin's link as a QR code, for a phone to scan "
        "(needs POCOLOBBY_PUBLIC_ORIGIN on the broker)",
    )
    p.set_defaults(func=settings_cmd)
