"""`pocolobby serve` and `pocolobby init`: the store checked, initialised or upgraded under its
lock, then served."""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import os
import sys
from typing import Any

from pocolobby import config, store_lock
from pocolobby.cli.common import (
    CliError,
    StoreRefused,
    Subparsers,
    lock_store,
    release_store,
    setup_django,
)

# How long a starting `serve` on PostgreSQL waits for another one checking the schema.
SHARE_WAIT_SECONDS = 30.0


def _share_postgres_store(detail: str) -> bool:
    """`serve` on PostgreSQL: the lock exclusive when no other broker serves (so this one may
    initialise or upgrade), else shared beside them. True when shared (no schema writes)."""
    lock = store_lock.PostgresStoreLock("serve")
    store_lock.HELD_POSTGRES.append(lock)
    try:
        if lock.try_exclusive():
            return False
        lock.take_shared(SHARE_WAIT_SECONDS)
    except store_lock.StoreInUse as exc:
        raise CliError(exc.refusal("start")) from None
    except OSError as exc:
        raise CliError(f"refusing to start: cannot take the store's lock ({exc})") from None
    return True


def _prepare(command: str, refused: str, detail: str = "") -> str:
    """Take the store's lock, set Django up and check, initialise or upgrade the store;
    CliError if refused.

    Everything the broker creates is private (umask 0077): the store, its -wal and -shm,
    the secret files. A data directory others could read is tightened, saying so once; a
    refused start takes back the secret files and the lock file it created, leaving nothing
    new behind.
    """
    # local: the bridge shares this CLI and must load nothing of the broker but its wire
    from lobbies.access import secret_files

    os.umask(0o077)
    directory = config.data_dir()
    existed = directory.exists()
    secret_files.private_directory(directory)
    setup_django()
    # local: the store and its models are usable only after django.setup() above
    from django.db import connection

    from lobbies.actions.restore import access_closed, broker_state
    from lobbies.storage.discipline import IncompatibleStore, diagnose_configured, prepare_store
    from pocolobby.backup import complete_swap

    def take_back() -> None:
        for path in secret_files.CREATED_SECRETS:
            path.unlink(missing_ok=True)
        release_store()
        if not existed:
            with contextlib.suppress(OSError):
                directory.rmdir()

    try:
        shared = False
        if command == "serve" and connection.vendor == "postgresql":
            shared = _share_postgres_store(detail)
        else:
            lock_store(command, refused, detail)
        if shared:
            # Other brokers serve this database: no schema change under them.
            diagnosis = diagnose_configured()
            if diagnosis.needs_writing:
                raise CliError(
                    f"refusing to start: this release would {_schema_work(diagnosis)}, but "
                    f"other brokers serve the store ({store_lock.HELD_POSTGRES[-1].holders()}); "
                    "stop them, run `pocolobby init`, then start them again"
                )
    except IncompatibleStore as exc:
        take_back()
        raise StoreRefused(f"refusing to start: {exc}") from None
    except CliError:
        take_back()
        raise

    swapped = complete_swap(directory)  # a restore interrupted mid-swap
    if swapped:
        print(f"completed an interrupted restore: {swapped}", flush=True)

    loosened = secret_files.make_private(directory)
    if loosened:
        print(
            f"pocolobby: warning: {directory} was open to other users ({len(loosened)} "
            "entries); made it 0700 and its files 0600",
            file=sys.stderr,
            flush=True,
        )
    try:
        done = prepare_store()
    except IncompatibleStore as exc:
        take_back()
        raise StoreRefused(f"refusing to start: {exc}") from None
    if command == "serve":
        for lock in store_lock.HELD_POSTGRES:
            lock.share()  # on PostgreSQL other brokers may start beside this one now
    broker_state()
    secret_files.admin_token(directory)
    if access_closed():
        done += (
            "; RESTORE MODE: agents refused and dispatch paused until `pocolobby restore --finish`"
        )
    return f"{done}; data in {directory}"


def _schema_work(diagnosis: Any) -> str:
    if diagnosis.state == "new":
        return "initialise an empty database"
    if diagnosis.unapplied:
        return (
            f"apply {len(diagnosis.unapplied)} schema steps ({', '.join(diagnosis.unapplied[:3])})"
        )
    return "write the store's identity"


def init(args: argparse.Namespace) -> int:
    print(_prepare("init", "check, initialise or upgrade the store"))
    return 0


# What `serve` prints; README.md's "Connect an agent" gives the same commands (a test holds it).
NEXT_STEPS = """Next, from another terminal (README.md, "Connect an agent"):
  pocolobby lobby create my-team
  pocolobby agent add my-team backend --enroll
  pocolobby status
then, on the agent's machine, in the project its Claude Code session runs in:
  pocolobby join CODE@URL"""


def address_step(url: str) -> str | None:
    """The line that comes first when the broker is not where the CLI looks by default."""
    if url == config.DEFAULT_URL:
        return None
    return (
        f"The CLI looks for the broker at {config.DEFAULT_URL}; in that terminal, first:\n"
        f"  export POCOLOBBY_URL={url}"
    )


def _loopback_host(host: str) -> bool:
    if host.casefold() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def serve(args: argparse.Namespace) -> int:
    if not _loopback_host(args.host) and not args.insecure_http:
        raise CliError(
            f"refusing to serve plain http on {args.host}: agents' tokens, the admin token and "
            "every message would cross the network unencrypted. Keep serve on 127.0.0.1 and "
            "put TLS in front of it (a reverse proxy such as Caddy on https://, "
            "docs/OPERATIONS.md), or add --insecure-http if only a trusted network (a TLS "
            "proxy's private network) reaches this address"
        )
    # Local pages answer only at this loopback address and port (lobbies/access/hosts.py).
    os.environ["POCOLOBBY_PORT"] = str(args.port)
    url = f"http://{args.host}:{args.port}"
    done = _prepare("serve", "start", f"on {url}")
    # local: these read the models and settings, usable only after _prepare set Django up
    from lobbies.fastlane import server
    from lobbies.push.presence import register_process
    from pocolobby import loops as serve_loops
    from pocolobby.asgi import application

    register_process()
    loops: list[object] = []

    def listening() -> None:
        server.confine_sqlite_to_one_thread()
        server.checkpoint_sqlite_in_the_background()
        server.freeze_startup_objects()
        loops.extend(serve_loops.start_loops())
        print(f"listening on {url}", flush=True)

    print(f"PocoLobby broker on {url} ({done})", flush=True)
    if step := address_step(url):
        print(step, flush=True)
    print(NEXT_STEPS, flush=True)
    from django.conf import settings  # local: as above, Django is set up by _prepare

    server.run(application, args.host, args.port, listening, settings.BOUNDS)
    if store_lock.LOST:
        raise CliError(f"stopped serving: {store_lock.LOST[0]}")
    return 0


def add_parsers(sub: Subparsers) -> None:
    """`serve` and `init`."""
    p = sub.add_parser("serve", help="run the broker")
    p.add_argument("--host", default="127.0.0.1", help="the address to listen on (127.0.0.1)")
    p.add_argument(
        "--insecure-http",
        action="store_true",
        help="allow --host on an address other machines reach, in plain http (only behind a "
        "TLS proxy on a trusted network)",
    )
    p.add_argument(
        "--port", type=int, default=config.DEFAULT_PORT, help=f"default {config.DEFAULT_PORT}"
    )
    p.add_argument("--data-dir", dest="serve_data_dir", help="data directory")
    p.set_defaults(func=serve)

    p = sub.add_parser("init", help="check the store, initialise or upgrade it, and exit")
    p.add_argument("--data-dir", dest="serve_data_dir", help="data directory")
    p.set_defaults(func=init)
