"""`pocolobby`: run the broker and administer it over its admin API."""

# Each command group's module adds its own subcommands: `broker` (serve, init), `operator` (the
# admin API's commands), `team` (a lobby from a manifest), `agent_side` (what an agent's
# machine runs), `messages` (an agent's messages without MCP) and `maintenance` (backup,
# restore, manage).

from __future__ import annotations

import argparse
import io
import os
import signal
import sys
from importlib import metadata
from pathlib import Path

from lobbies.wire.terminal import for_terminal as shown
from pocolobby.cli import agent_side, broker, maintenance, messages, operator, team
from pocolobby.cli.common import CliError, Parser, StoreRefused


def _version() -> str:
    """The installed distribution's version; a tree run without installing says so."""
    try:
        return metadata.version("pocolobby")
    except metadata.PackageNotFoundError:
        return "(not installed)"


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="pocolobby", description=__doc__)
    parser.add_argument("--data-dir", help="data directory (default: $POCOLOBBY_DATA_DIR)")
    parser.add_argument("--version", action="version", version=f"pocolobby {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    broker.add_parsers(sub)
    operator.add_parsers(sub)
    team.add_parsers(sub)
    agent_side.add_parsers(sub)
    messages.add_parser(sub)
    maintenance.add_parsers(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one command; output into a pipe whose reader left (`--json | head`) ends it quietly
    with 141, as a program stopped by SIGPIPE, instead of a traceback."""
    if isinstance(sys.stdout, io.TextIOWrapper):
        # A terminal or file that cannot encode a peer's text shows it as escapes: a message in
        # another script must not make its reader's command fail.
        sys.stdout.reconfigure(errors="backslashreplace")
    try:
        try:
            return _run(argv)
        finally:
            sys.stdout.flush()
    except BrokenPipeError:
        # What is still buffered goes nowhere, so the interpreter's last flush cannot fail.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE


def _run(argv: list[str] | None) -> int:
    args = build_parser().parse_args(argv)
    data_dir = getattr(args, "serve_data_dir", None) or args.data_dir
    if data_dir:
        os.environ["POCOLOBBY_DATA_DIR"] = str(Path(data_dir).expanduser().resolve())
    try:
        return int(args.func(args))
    except StoreRefused as exc:
        print(f"pocolobby: {shown(exc)}", file=sys.stderr)
        return 2
    except CliError as exc:  # often the broker's error, which may echo another party's text
        print(f"pocolobby: {shown(exc)}", file=sys.stderr)
        return 1
