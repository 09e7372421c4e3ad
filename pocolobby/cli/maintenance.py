"""The store's care: `backup` while it serves, `restore` into restore mode (and `--finish`), and
Django's management commands under the store's lock."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from pocolobby import config
from pocolobby.cli.admin_client import broker_url, call
from pocolobby.cli.common import (
    CliError,
    StoreRefused,
    Subparsers,
    lock_store,
    release_store,
    setup_django,
)


def backup_cmd(args: argparse.Namespace) -> int:
    # local: backup reads the store's identity from lobbies, which agent-side commands never load
    from pocolobby import backup

    os.umask(0o077)  # a backup holds every token hash and message: private from creation

    url = os.environ.get("DATABASE_URL", "")
    destination = Path(args.to).expanduser().resolve() if args.to else None
    if args.keep is not None and args.keep < 1:
        raise CliError("--keep must be at least 1")
    data_dir = config.data_dir()
    take = backup.take_backup
    if url and not url.startswith("sqlite"):
        setup_django()  # the connection settings, parsed as the broker parses them
        from pocolobby import pg_backup  # local: as backup above, and only for PostgreSQL

        take = pg_backup.take_backup
    try:
        report = take(data_dir, destination or data_dir / "backups", args.keep)
    except backup.BackupFailed as exc:
        raise CliError(str(exc)) from None
    print(report.lines())
    return 0


def restore_cmd(args: argparse.Namespace) -> int:
    if args.finish:
        if args.backup:
            raise CliError("--finish takes no BACKUP: it reopens the store the broker serves")
        data = call("POST", "/restore/finish")
        print(
            f"restore finished: agents admitted again (incarnation {data['incarnation']}); "
            f"{data['uncertain']} pending copies are listed to their agents as uncertain work"
        )
        return 0
    if not args.backup:
        raise CliError("name the BACKUP to restore, or pass --finish")
    os.umask(0o077)  # the restored store, its attachments and configurations are private
    setup_django()
    # local: as backup_cmd's import, the restore loads lobbies only for this command
    from pocolobby.restore import RestoreFailed, RestoreRefused, restore

    configs = Path(args.configs_dir or config.data_dir() / "restored-configs").expanduser()
    try:
        report = restore(args.backup, configs.resolve(), broker_url())
    except RestoreRefused as exc:
        raise CliError(f"restore refused, nothing changed: {exc}") from None
    except RestoreFailed as exc:
        raise CliError(f"restore failed: {exc}") from None
    print(report.lines())
    return 0


# Management commands that only read the store (or write source files, not the store): they
# run beside a serving broker. Every other one changes the store, or may (shell, dbshell),
# and holds the store's lock.
READING_COMMANDS = frozenset(
    {
        "check",
        "diffsettings",
        "dumpdata",
        "findstatic",
        "help",
        "inspectdb",
        "makemigrations",
        "showmigrations",
        "sqlflush",
        "sqlmigrate",
        "sqlsequencereset",
        "version",
    }
)


def manage_cmd(args: argparse.Namespace) -> int:
    os.umask(0o077)  # whatever it creates in the data directory stays private
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "pocolobby.settings")
    name = next((word for word in args.rest if not word.startswith("-")), None)
    if name is not None and name not in READING_COMMANDS:
        setup_django()
        # local: the store's checks are usable only after django.setup() above
        from lobbies.storage.discipline import IncompatibleStore, diagnose_configured

        refused = f"run `manage {name}`"
        lock_store(f"manage {name}", refused)
        try:
            diagnosis = diagnose_configured()
            if diagnosis.state == "new":
                raise CliError(
                    f"refusing to {refused}: the store is not initialised; `pocolobby init` "
                    "initialises it with its identity"
                )
        except (IncompatibleStore, CliError) as exc:
            release_store()  # a lock file this refusal created goes with it
            if isinstance(exc, CliError):
                raise
            raise StoreRefused(f"refusing to {refused}: {exc}") from None
    # local: Django loads only for the commands that run it, after the settings module is set
    from django.core.management import execute_from_command_line

    execute_from_command_line(["pocolobby manage", *args.rest])
    return 0


def add_parsers(sub: Subparsers) -> None:
    """`backup`, `restore` and `manage`."""
    p = sub.add_parser("backup", help="a checked, consistent copy of the store while it serves")
    p.add_argument("--to", help="directory for backups (default <data dir>/backups)")
    p.add_argument("--keep", type=int, help="keep only the newest N backups in that directory")
    p.set_defaults(func=backup_cmd)

    p = sub.add_parser("restore", help="restore a backup into restore mode, or --finish it")
    p.add_argument("backup", nargs="?", help="a backup directory or store file")
    p.add_argument("--configs-dir", help="where to write replacement agent configurations")
    p.add_argument("--finish", action="store_true", help="reopen the restored broker to agents")
    p.set_defaults(func=restore_cmd)

    p = sub.add_parser("manage", help="run a Django management command (e.g. createsuperuser)")
    p.add_argument("rest", nargs=argparse.REMAINDER, help="the command and its arguments")
    p.set_defaults(func=manage_cmd)
