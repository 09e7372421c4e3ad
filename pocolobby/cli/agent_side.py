"""The commands an agent's machine runs: the bridge, `connect`, and Claude Code's status line,
hooks and token reports. Each loads only what it uses (they run often, or beside a session)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pocolobby.cli.common import CliError, Subparsers
from pocolobby.cli.doctor import add_parser as add_doctor_parser


def bridge_cmd(args: argparse.Namespace) -> int:
    """The MCP stdio server a Claude Code session runs; imported here so serve stays lean."""
    # local: the bridge loads the MCP SDK, which no other command needs
    from pocolobby.bridge.server import main as bridge_main

    return bridge_main(
        args.config,
        verbose=args.verbose,
        deliver=args.deliver,
        pane=args.pane,
        hold_seconds=args.hold_seconds,
        headless=args.headless,
        tmux_socket=args.tmux_socket,
        idle_after=args.idle_after,
    )


def connect_cmd(args: argparse.Namespace) -> int:
    # local: as bridge_cmd, the bridge's modules load only for the commands that use them
    from pocolobby.bridge.connect import ConnectError, connect

    try:
        print(
            connect(
                args.config,
                args.name,
                Path.cwd(),
                host=args.host,
                deliver=args.deliver,
                hooks=not args.no_hooks,
                replace=args.replace,
                scope=args.scope,
            )
        )
    except ConnectError as exc:
        raise CliError(str(exc)) from None
    return 0


def join_cmd(args: argparse.Namespace) -> int:
    # local: as bridge_cmd, the HTTP client and the hosts' writers load only for join
    from pocolobby.join import run

    return run(args)


def statusline_cmd(args: argparse.Namespace) -> int:
    """Claude Code's status line: prints one line, reports plan usage; always exits 0."""
    # local: the status line runs every few seconds; it loads only what it uses
    from pocolobby.agent_reports import statusline

    statusline(args.config, sys.stdin.read())
    return 0


def hook_cmd(args: argparse.Namespace) -> int:
    """Claude Code's UserPromptSubmit and Stop hooks: silent, always exits 0."""
    # local: a hook runs on every prompt; it loads only what it uses
    from pocolobby.agent_reports import hook

    try:
        stdin = sys.stdin.read()
    except (OSError, ValueError):
        return 0
    return hook(args.config, stdin)


def tokens_cmd(args: argparse.Namespace) -> int:
    # local: as statusline_cmd, an agent-side command loads only what it uses
    from pocolobby.agent_reports import send_tokens

    return send_tokens(args.config, args.transcripts)


def add_parsers(sub: Subparsers) -> None:
    """`bridge`, `join`, `connect`, `doctor`, `statusline`, `hook` and `tokens`."""
    _bridge_parser(sub)
    _join_parser(sub)
    _connect_parser(sub)
    add_doctor_parser(sub)
    _statusline_parser(sub)
    _hook_parser(sub)
    _tokens_parser(sub)


def _bridge_parser(sub: Subparsers) -> None:
    p = sub.add_parser("bridge", help="the MCP stdio server an agent session runs")
    p.add_argument("--config", required=True, help="the agent's configuration file")
    p.add_argument(
        "--verbose",
        action="store_true",
        help="log connections and catalog revisions to stderr, not only what is wrong",
    )
    p.add_argument(
        "--deliver",
        choices=("channel", "tmux"),
        default="channel",
        help="push as Claude Channel events (default) or type one line into a tmux pane",
    )
    p.add_argument("--pane", help="with --deliver tmux: the pane id %%N (default $TMUX_PANE)")
    p.add_argument(
        "--tmux-socket",
        metavar="NAME|PATH",
        help="with --deliver tmux: the tmux server holding the pane, a name as `tmux -L` takes "
        "it or a socket path as `tmux -S` does (default: $TMUX's server, else the one of your "
        "servers that holds the pane)",
    )
    p.add_argument(
        "--idle-after",
        type=float,
        metavar="SECONDS",
        help="with --deliver tmux: also type a notice into a pane without a recognised prompt "
        "once its screen has not changed for SECONDS (risk: a program busy without output "
        "reads the line as input)",
    )
    p.add_argument(
        "--hold-seconds",
        type=float,
        default=300.0,
        help="with --deliver tmux: how long a notice waits for an idle prompt before it is "
        "given up and the owner's attention is required (default 300)",
    )
    p.add_argument(
        "--headless",
        action="store_true",
        help="with --deliver tmux: no MCP host on stdin; only type notices into the pane, for "
        "an agent that uses `pocolobby msg` (runs until SIGINT/SIGTERM)",
    )
    p.set_defaults(func=bridge_cmd)


def _connect_parser(sub: Subparsers) -> None:
    p = sub.add_parser(
        "connect",
        help="set the host up from a configuration file: its MCP entry (Claude Code's local "
        "scope, Codex's config.toml or Gemini's .gemini/settings.json), for Claude Code also "
        "the status line and hooks; prints the launch command",
    )
    p.add_argument("--config", required=True, help="the agent's configuration file")
    p.add_argument("--name", default="pocolobby", help="the MCP server name (default pocolobby)")
    p.add_argument(
        "--host",
        choices=("claude", "codex", "gemini"),
        default="claude",
        help="claude: Claude Code's local scope for this project (default); codex: "
        "~/.codex/config.toml "
        "($CODEX_HOME/config.toml); gemini: this directory's .gemini/settings.json",
    )
    p.add_argument(
        "--deliver",
        choices=("channel", "tmux"),
        default=None,
        help="how the bridge delivers pushes (default: channel for claude, tmux for codex)",
    )
    p.add_argument(
        "--scope",
        choices=("local", "project"),
        default="local",
        help="Claude Code: local (default) keeps the entry, with this machine's paths, in your "
        "own settings for the project (~/.claude.json, as `claude mcp add --scope local`); "
        "project writes the shared .mcp.json and approves it in .claude/settings.local.json",
    )
    p.add_argument(
        "--no-hooks",
        action="store_true",
        help="Claude Code: leave the status line and hooks alone (the dashboard then shows no "
        "plan usage, turns or tokens for this agent)",
    )
    p.add_argument(
        "--replace",
        action="store_true",
        help="replace an entry that runs the bridge for another agent (Codex reads one "
        "config.toml for every project; Claude Code's local scope has one entry per repository)",
    )
    p.set_defaults(func=connect_cmd)


def _join_parser(sub: Subparsers) -> None:
    p = sub.add_parser(
        "join",
        help="on the agent's machine: redeem an enrolment code for the agent's configuration "
        "and set the host up",
    )
    p.add_argument("code", help="what `pocolobby agent enroll` printed: CODE@URL")
    p.add_argument("--url", help="the broker's address, if the code's is not the one to use")
    p.add_argument(
        "--host",
        choices=("claude", "codex", "gemini", "shell"),
        default="claude",
        help="the agent's program (default claude; shell: `pocolobby msg`, nothing to set up)",
    )
    p.add_argument("--dir", default=".", help="the project the agent works in (default: here)")
    p.add_argument(
        "--config",
        help="where to write the configuration (default: the per-user configuration "
        "directory, LOBBY-AGENT.json)",
    )
    p.set_defaults(func=join_cmd)


def _statusline_parser(sub: Subparsers) -> None:
    p = sub.add_parser("statusline", help="Claude Code status line: plan usage to the broker")
    p.add_argument("--config", help="the agent's configuration file (or $POCOLOBBY_CONFIG)")
    p.set_defaults(func=statusline_cmd)


def _hook_parser(sub: Subparsers) -> None:
    p = sub.add_parser("hook", help="Claude Code UserPromptSubmit/Stop hook: turns and tokens")
    p.add_argument("--config", help="the agent's configuration file (or $POCOLOBBY_CONFIG)")
    p.set_defaults(func=hook_cmd)


def _tokens_parser(sub: Subparsers) -> None:
    p = sub.add_parser("tokens", help="send a session transcript's token counts by hand")
    p.add_argument("--config", help="the agent's configuration file (or $POCOLOBBY_CONFIG)")
    p.add_argument("transcripts", nargs="+", help="session transcript .jsonl files")
    p.set_defaults(func=tokens_cmd)
