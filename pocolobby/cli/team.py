"""`pocolobby team apply FILE`: a lobby's agents and rooms from one TOML manifest.

The file is read here (TOML, each `role_file` relative to the manifest's folder); the broker
checks the rest, plans, and applies the plan in one transaction (lobbies/actions/team.py), so
a refused manifest changes nothing.
"""

from __future__ import annotations

import argparse
import datetime
import textwrap
import tomllib
from pathlib import Path
from typing import Any

from lobbies.wire.terminal import for_terminal as shown
from pocolobby.cli.admin_client import Refused, call
from pocolobby.cli.common import CliError, Subparsers
from pocolobby.cli.operator import (
    enroll_options,
    enrollment_url,
    explain_enrollment,
    show_enrollment,
)

EXAMPLE = """\
example manifest (team.toml):

  lobby = "my-team"

  [agents.lead]
  description = "Plans the work"
  role_file = "roles/lead.md"        # relative to this file's folder
  permissions = ["broadcast", "manage_rooms"]

  [agents.backend]
  description = "API work"

  [rooms.design]
  members = ["lead", "backend"]

Every key an agent leaves out is its default: description "", no role, no permissions.
"""


def _refuse_dates(value: object, key: str) -> None:
    """TOML's dates and times have no place in a manifest (and no JSON form)."""
    if isinstance(value, datetime.date | datetime.time):
        raise CliError(f"{key}: a date or time, which no manifest key takes")
    if isinstance(value, dict):
        for name, item in value.items():
            _refuse_dates(item, f"{key}.{name}" if key else str(name))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _refuse_dates(item, f"{key}.{index}")


def _role(folder: Path, raw: object, key: str) -> str:
    if not isinstance(raw, str) or not raw:
        raise CliError(f"{key}: must be a file's path (a string), relative to the manifest")
    path = (folder / Path(raw).expanduser()).resolve()
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise CliError(f"{key}: cannot read the role file {path}: {reason}") from None


def read_manifest(path: Path) -> dict[str, Any]:
    """The manifest as the broker takes it: each agent's role_file read into `role`."""
    try:
        data = tomllib.loads(path.read_bytes().decode("utf-8"))
    except OSError as exc:
        raise CliError(f"cannot read the manifest {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise CliError(f"{path} is not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        raise CliError(f"{path} is not valid TOML: {exc}") from None
    _refuse_dates(data, "")
    agents = data.get("agents")
    for name, spec in agents.items() if isinstance(agents, dict) else ():
        if not isinstance(spec, dict):
            continue  # the broker names the key and the type it wants
        key = f"agents.{name}"
        if "role" in spec:
            raise CliError(
                f"{key}.role: unknown key; put the role in a file and name it with role_file"
            )
        if "role_file" in spec:
            spec["role"] = _role(path.parent, spec.pop("role_file"), f"{key}.role_file")
    return data


def _line(change: dict[str, str]) -> str:
    line = f"  {change['change']} {change['subject']} {change['name']}"
    return line + (f": {change['detail']}" if change["detail"] else "")


def team_cmd(args: argparse.Namespace) -> int:
    path = Path(args.file).expanduser()
    manifest = read_manifest(path)
    body = {
        "manifest": manifest,
        "prune": args.prune,
        "dry_run": args.dry_run,
        "expires_minutes": args.expires,
    }
    try:
        data = call("POST", "/team", body)
    except Refused as exc:
        raise Refused(f"{path} refused, nothing was changed: {exc}") from None
    lobby, changes = data["lobby"], data["changes"]
    if not changes:
        print(f"lobby {shown(lobby)} already matches {shown(path)}: nothing changed")
    else:
        print(
            f"{'would change' if args.dry_run else 'changed'} lobby {shown(lobby)} "
            f"to match {shown(path)}:"
        )
        for change in changes:
            print(shown(_line(change)))
        count = f"{len(changes)} change{'s' if len(changes) > 1 else ''}"
        if args.dry_run:
            print(
                f"dry run: nothing was changed ({count} to make; each agent added gets its "
                "enrolment code then)"
            )
        else:
            print(f"{count} made")
    left = data["not_in_manifest"]
    if left["agents"] or left["rooms"]:
        kept = [f"agents {', '.join(left['agents'])}"] if left["agents"] else []
        kept += [f"rooms {', '.join(left['rooms'])}"] if left["rooms"] else []
        print(
            shown(f"not in the manifest, left as they are: {'; '.join(kept)}")
            + " (--prune removes such agents and archives such rooms)"
        )
    url = enrollment_url(args)
    if data["enrollments"]:
        print()
    for issued in data["enrollments"]:
        show_enrollment(lobby, issued["agent"], issued["code"], issued["expires_at"], url)
    if data["enrollments"]:
        explain_enrollment(url)
    return 0


def add_parsers(sub: Subparsers) -> None:
    p = sub.add_parser("team", help="set a lobby's agents and rooms up from one TOML manifest")
    tsub = p.add_subparsers(dest="team_command", required=True)
    what = textwrap.fill(
        "Make a lobby's agents and rooms match a TOML manifest: create the lobby if needed, "
        "add or change agents (description, role, permissions) and rooms (members), and print "
        "an enrolment code for each agent added. Nothing is removed without --prune. All or "
        "nothing: a refused manifest changes nothing. Run twice, the second changes nothing.",
        width=78,
    )
    apply = tsub.add_parser(
        "apply",
        help="make a lobby's agents and rooms match a TOML manifest",
        description=what,
        epilog=EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    apply.add_argument("file", help="the manifest (TOML); role_file paths are relative to it")
    apply.add_argument(
        "--dry-run", action="store_true", help="print what would change and change nothing"
    )
    apply.add_argument(
        "--prune",
        action="store_true",
        help="also remove the lobby's agents the manifest leaves out (as `agent remove`: "
        "their tokens and inboxes are deleted, no undo) and archive its rooms the manifest "
        "leaves out (a later manifest that names one restores it as a new, empty room)",
    )
    enroll_options(apply)
    p.set_defaults(func=team_cmd)
