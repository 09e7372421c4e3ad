"""What every `pocolobby` command shares: its failures, its argument parser, Django set up on
demand and the store's lock."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import NoReturn, TypeAlias

from pocolobby import store_lock


class CliError(Exception):
    """A failure to report in one line and exit 1."""


class Parser(argparse.ArgumentParser):
    """argparse, but bad arguments exit 1 as every other failure to start: 2 means a decided
    refusal here (`msg`: the broker refused; `init`: the store was refused)."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(1, f"{self.prog}: error: {message}\n")


# What `add_subparsers` answers on a Parser: each command module adds its commands to it.
Subparsers: TypeAlias = "argparse._SubParsersAction[Parser]"


class StoreRefused(CliError):
    """The database file is not one this release may open; it was left untouched."""


def setup_django() -> None:
    import django  # local: commands that only talk HTTP to a broker never load Django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "pocolobby.settings")
    django.setup()


def lock_store(command: str, refused: str, detail: str = "") -> None:
    """Hold the store's lock exclusive for the rest of this process, before anything touches
    the store (pocolobby/store_lock.py); CliError naming the holder if another has it."""
    from django.db import connection  # local: Django is set up by the caller

    try:
        if connection.vendor == "postgresql":
            lock = store_lock.PostgresStoreLock(command)
            store_lock.HELD_POSTGRES.append(lock)
            lock.take_exclusive()
        else:
            database = Path(connection.settings_dict["NAME"])
            database.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            store_lock.hold(database, store_lock.describe(command, detail))
    except store_lock.StoreInUse as exc:
        raise CliError(exc.refusal(refused)) from None
    except OSError as exc:  # the lock file, or PostgreSQL unreachable (ConnectionError)
        raise CliError(f"refusing to {refused}: cannot take the store's lock ({exc})") from None


def release_store() -> None:
    """Give the store's lock back early (a refusal): nothing of it is left behind."""
    from django.db import connection  # local: Django is set up by the caller

    if connection.vendor == "postgresql":
        for lock in store_lock.HELD_POSTGRES:
            lock.release()
    else:
        store_lock.release(Path(connection.settings_dict["NAME"]))
