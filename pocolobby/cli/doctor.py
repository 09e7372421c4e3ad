"""`pocolobby doctor`'s arguments; running it loads `pocolobby.doctor` and its HTTP client."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from lobbies.wire.terminal import for_terminal as shown
from pocolobby.cli.common import Subparsers


def doctor_cmd(args: argparse.Namespace) -> int:
    # local: only this command needs the checks and the HTTP client
    from pocolobby.doctor import diagnose, report

    lines, status = report(diagnose(args.config, Path(args.dir or Path.cwd()), os.environ))
    for line in lines:  # the broker's words and the files' contents are others' text
        print(shown(line))
    return status


def add_parser(sub: Subparsers) -> None:
    p = sub.add_parser(
        "doctor",
        help="check an agent's configuration, broker, TLS, token and host setup; exit 1 on "
        "any failure",
        description="Check, in order, the agent's configuration file, the broker at its URL, "
        "the token (without claiming the agent or disturbing its session) and the host setup "
        "in a project directory; one line per check, with the fix for each failure.",
    )
    p.add_argument(
        "--config",
        help="the agent's configuration file (default: $POCOLOBBY_CONFIG, else the one the "
        "directory's MCP entry runs the bridge with)",
    )
    p.add_argument("--dir", help="the project directory to check (default: the current one)")
    p.set_defaults(func=doctor_cmd)
