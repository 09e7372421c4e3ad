"""`pocolobby`: run the broker and administer it over its admin API."""

from __future__ import annotations

import argparse
import contextlib
import io
import ipaddress
import json
import os
import signal
import sys
import tempfile
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import quote, urlsplit

import httpx

from lobbies.wire import for_terminal as shown
from pocolobby import config, msg, store_lock
from pocolobby.bridge.config import is_loopback


class CliError(Exception):
    """A failure to report in one line and exit 1."""


class Parser(argparse.ArgumentParser):
    """argparse, but bad arguments exit 1 as every other failure to start: 2 means a decided
    refusal here (`msg`: the broker refused; `init`: the store was refused)."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(1, f"{self.prog}: error: {message}\n")


# ---------------------------------------------------------------- serve


def _setup_django() -> None:
    import django  # local: commands that only talk HTTP to a broker never load Django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "pocolobby.settings")
    django.setup()


# How long a starting `serve` on PostgreSQL waits for another one checking the schema.
SHARE_WAIT_SECONDS = 30.0


def _lock_store(command: str, refused: str, detail: str = "") -> None:
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


def _release_store() -> None:
    """Give the store's lock back early (a refusal): nothing of it is left behind."""
    from django.db import connection  # local: Django is set up by the caller

    if connection.vendor == "postgresql":
        for lock in store_lock.HELD_POSTGRES:
            lock.release()
    else:
        store_lock.release(Path(connection.settings_dict["NAME"]))


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
    from lobbies import secret_files

    os.umask(0o077)
    directory = config.data_dir()
    existed = directory.exists()
    secret_files.private_directory(directory)
    _setup_django()
    # local: the store and its models are usable only after django.setup() above
    from django.db import connection

    from lobbies.actions.restore import access_closed, broker_state
    from lobbies.storage import IncompatibleStore, diagnose_configured, prepare_store
    from pocolobby.backup import complete_swap

    def take_back() -> None:
        for path in secret_files.CREATED_SECRETS:
            path.unlink(missing_ok=True)
        _release_store()
        if not existed:
            with contextlib.suppress(OSError):
                directory.rmdir()

    try:
        shared = False
        if command == "serve" and connection.vendor == "postgresql":
            shared = _share_postgres_store(detail)
        else:
            _lock_store(command, refused, detail)
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


class StoreRefused(CliError):
    """The database file is not one this release may open; it was left untouched."""


def init(args: argparse.Namespace) -> int:
    print(_prepare("init", "check, initialise or upgrade the store"))
    return 0


# What `serve` prints; README.md's "Connect an agent" gives the same commands (a test holds it).
NEXT_STEPS = """Next, from another terminal (README.md, "Connect an agent"):
  pocolobby lobby create my-team
  pocolobby agent add my-team backend --config ~/backend.json
  pocolobby status
then, in the project the agent's Claude Code session runs in:
  pocolobby connect --config ~/backend.json"""


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
    # Local pages answer only at this loopback address and port (lobbies/hosts.py).
    os.environ["POCOLOBBY_PORT"] = str(args.port)
    url = f"http://{args.host}:{args.port}"
    done = _prepare("serve", "start", f"on {url}")
    # local: these read the models and settings, usable only after _prepare set Django up
    from lobbies.presence import register_process
    from pocolobby import loops as serve_loops
    from pocolobby import server
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
    print(NEXT_STEPS, flush=True)
    from django.conf import settings

    server.run(application, args.host, args.port, listening, settings.BOUNDS)
    return 0


# ---------------------------------------------------------------- admin API client


def _broker_url() -> str:
    """The broker the operator's commands talk to (and agents' configurations name)."""
    return os.environ.get("POCOLOBBY_URL", config.DEFAULT_URL).rstrip("/")


def _admin_client() -> httpx.Client:
    token = os.environ.get("POCOLOBBY_ADMIN_TOKEN")
    if not token:
        path = config.data_dir() / "admin-token"
        try:
            token = path.read_text().strip()
        except FileNotFoundError:
            raise CliError(
                f"no admin token at {path}: start the broker (pocolobby serve) with the same "
                "data directory, or set POCOLOBBY_ADMIN_TOKEN"
            ) from None
    url = _broker_url()
    if urlsplit(url).scheme.casefold() == "http" and not is_loopback(url):
        raise CliError(
            f"POCOLOBBY_URL {url} is plain http to another machine, which would send the "
            "admin token unencrypted; nothing was sent. Use the broker's https:// address, or "
            "reach it through an SSH tunnel (ssh -N -L 8787:127.0.0.1:8787 HOST, then "
            "POCOLOBBY_URL=http://127.0.0.1:8787)"
        )
    return httpx.Client(
        base_url=f"{url}/v1/admin", headers={"Authorization": f"Bearer {token}"}, timeout=30
    )


def _call(method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    with _admin_client() as client:
        try:
            response = client.request(method, path, json=body)
        except httpx.TransportError as exc:
            raise CliError(
                f"cannot reach the broker at {client.base_url} ({exc}); is `pocolobby serve` "
                "running, and is POCOLOBBY_URL right?"
            ) from None
    try:
        data: dict[str, Any] = response.json()
    except ValueError:
        raise CliError(f"the broker answered {response.status_code} without JSON") from None
    if response.is_error:
        error = data.get("error", {})
        raise CliError(f"{error.get('message', response.reason_phrase)} ({error.get('code')})")
    return data


class ConfigFile:
    """The agent's configuration file, prepared before the broker is asked for a token.

    The temporary file exists (mode 0600) before the request, so a token the broker issues is
    never lost to an unwritable directory; it is renamed into place once written.
    """

    def __init__(self, raw: str, *, replace: bool) -> None:
        self.path = Path(raw).expanduser().resolve()
        if not self.path.parent.is_dir():
            raise CliError(f"{self.path.parent} is not a directory")
        if self.path.exists() and not replace:
            raise CliError(f"{self.path} exists; choose another --config path")
        try:
            fd, temp = tempfile.mkstemp(
                dir=self.path.parent, prefix=f".{self.path.name}.", suffix=".tmp"
            )
        except OSError as exc:
            raise CliError(f"cannot write in {self.path.parent}: {exc.strerror}") from None
        os.fchmod(fd, 0o600)
        self.fd, self.temp = fd, Path(temp)

    def write(self, answer: dict[str, Any]) -> None:
        """Write {"url","token","lobby","agent"}, fsync, and rename into place."""
        url = _broker_url()
        content = json.dumps(
            {
                "url": url,
                "token": answer["token"],
                "lobby": answer["lobby"],
                "agent": answer["agent"],
            },
            indent=2,
        )
        with os.fdopen(self.fd, "w") as handle:
            handle.write(content + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(self.temp, self.path)

    def discard(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)
        self.temp.unlink(missing_ok=True)


def _issue_into(config_file: ConfigFile, method: str, path: str, body: Any = None) -> None:
    try:
        config_file.write(_call(method, path, body))
    except BaseException:
        config_file.discard()
        raise


def _segment(value: str) -> str:
    """A name as one URL path segment: `a/b` must not reach another route."""
    return quote(value, safe="")


def _read_role(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CliError(f"cannot read the role file {path}: {exc}") from None


def _table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    if not rows:
        return "(none)"
    cells = [[("" if r.get(c) is None else shown(r.get(c))) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)) for row in cells]
    return "\n".join(line.rstrip() for line in lines)


def lobby_cmd(args: argparse.Namespace) -> int:
    if args.lobby_command == "create":
        _call("POST", "/lobbies", {"name": args.name})
        print(f"created lobby {args.name}")
    elif args.lobby_command in ("pause", "resume"):
        paused = args.lobby_command == "pause"
        _call("POST", f"/lobbies/{_segment(args.name)}/delivery", {"paused": paused})
        print(
            f"delivery in {args.name} paused: sends queue, nothing is pushed until resume"
            if paused
            else f"delivery in {args.name} resumed"
        )
    elif args.lobby_command == "cancel-scheduled":
        data = _call(
            "POST",
            f"/lobbies/{_segment(args.name)}/cancel-scheduled",
            {"message_id": args.message_id},
        )
        print(f"scheduled message {data['message_id']}: {data['status']}")
    elif args.lobby_command == "delete":
        _call("DELETE", f"/lobbies/{_segment(args.name)}")
        print(f"deleted lobby {args.name} and everything in it")
    else:
        data = _call("GET", "/lobbies")
        print(
            json.dumps(data, indent=2)
            if args.json
            else _table(data["lobbies"], ["name", "created_at"])
        )
    return 0


AGENT_COLUMNS = ["agent_id", "enabled", "pending", "held", "last_message_at", "runtime_id"]


def agent_cmd(args: argparse.Namespace) -> int:
    command = args.agent_command
    base = f"/lobbies/{_segment(args.lobby)}/agents"
    if command == "list":
        data = _call("GET", base)
        print(json.dumps(data, indent=2) if args.json else _table(data["agents"], AGENT_COLUMNS))
        return 0
    target = f"{base}/{_segment(args.name)}"
    if command == "add":
        role = _read_role(args.role_file) if args.role_file else ""
        config_file = ConfigFile(args.config, replace=False)
        _issue_into(
            config_file,
            "POST",
            base,
            {
                "agent_id": args.name,
                "description": args.description,
                "role": role,
                "manage_rooms": args.manage_rooms,
                "broadcast": args.broadcast,
            },
        )
        print(
            f"added {args.name} to {args.lobby}; its configuration is in {config_file.path} "
            "(mode 0600)"
        )
    elif command == "rotate":
        config_file = ConfigFile(args.config, replace=True)
        _issue_into(config_file, "POST", f"{target}/rotate")
        print(
            f"rotated {args.name}'s token; earlier tokens are revoked; new configuration in "
            f"{config_file.path} (mode 0600)"
        )
    elif command == "set-role":
        role = _read_role(args.role_file)
        _call("POST", f"{target}/role", {"role": role})
        print(f"set {args.name}'s role ({len(role)} characters); its next get_context shows it")
    elif command == "permissions":
        body = {
            "broadcast": None if args.broadcast is None else args.broadcast == "yes",
            "manage_rooms": None if args.manage_rooms is None else args.manage_rooms == "yes",
        }
        data = _call("POST", f"{target}/permissions", body)
        print(
            f"{args.name}: broadcast {'yes' if data['broadcast'] else 'no'}, "
            f"manage_rooms {'yes' if data['manage_rooms'] else 'no'}"
        )
    elif command == "remove":
        _call("DELETE", target)
        print(f"removed {args.name} from {args.lobby}")
    elif command == "hand-over":
        data = _call("POST", f"{target}/hand-over")
        print(
            f"handed {args.name} over to the waiting conversation (runtime "
            f"{data['runtime_id']}); it is admitted and bootstraps within seconds. The "
            f"conversation that held it (runtime {data['retired_runtime_id'] or 'none'}) "
            "is retired and can no longer act for the agent."
        )
    else:
        data = _call("POST", f"{target}/{command}")
        print(f"{command}: {args.name} " + json.dumps(data))
    return 0


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


def _yes(value: Any) -> str:
    return "yes" if value else "no"


def _narrow(agent: dict[str, Any]) -> dict[str, str]:
    """One agent's row of the default view; held counts held messages and says when the
    agent's notices are held too."""
    name = str(agent["agent_id"])
    if len(name) > AGENT_CHARS:
        name = name[: AGENT_CHARS - 1] + "…"
    held = str(agent.get("held") or 0)
    if agent.get("notices_held"):
        held += "+notices"
    return {
        "agent": name,
        "on": _yes(agent.get("enabled")),
        "conn": _yes(agent.get("connected")),
        "pending": str(agent.get("pending") or 0),
        "imp": str(agent.get("important") or 0),
        "held": held,
        "idle": _duration(agent.get("idle_seconds")),
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
    data = _call("POST", "/accounts", body)
    print(
        f"{'created' if data['created'] else 'changed'} account {data['email']}: enabled "
        f"{_yes(data['enabled'])}, may create lobbies {_yes(data['may_create_lobbies'])}, "
        f"operator {_yes(data['operator'])}"
        + ("; its email-code sign-in opens /admin/" if data["operator"] else "")
    )
    return 0


def status_cmd(args: argparse.Namespace) -> int:
    data = _call("GET", "/status" + (f"?lobby={quote(args.lobby)}" if args.lobby else ""))
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
            print(_table(lobby["agents"], STATUS_COLUMNS))
        else:
            print(_table([_narrow(a) for a in lobby["agents"]], NARROW_COLUMNS))
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
    return 0


ATTACHMENT_COLUMNS = ["id", "name", "media_type", "size", "uploader", "messages", "expired_at"]


def attachments_cmd(args: argparse.Namespace) -> int:
    """The lobby's attachments, metadata and usage only: no command downloads content."""
    data = _call("GET", f"/lobbies/{_segment(args.lobby)}/attachments")
    if args.json:
        print(json.dumps(data, indent=2))
        return 0
    usage = data["usage"]
    print(
        f"lobby {shown(data['lobby'])}: {usage['content_bytes']} of {usage['quota_bytes']} "
        f"bytes of distinct content; {usage['attachments']} live, {usage['expired']} expired, "
        f"{usage['pending_uploads']} pending uploads"
    )
    print(_table(data["attachments"], ATTACHMENT_COLUMNS))
    return 0


def settings_cmd(args: argparse.Namespace) -> int:
    """Print a one-minute, single-use link that opens this broker's pages as its operator.

    Printed, never handed to a browser: `webbrowser.open` starts the browser with the link in
    its command line, which every local user can read (docs/DECISIONS.md).
    """
    ticket = _call("POST", "/settings-ticket")["ticket"]
    parts = urlsplit(_broker_url())
    port = parts.port or config.DEFAULT_PORT
    print(
        "Open this link in a browser on this machine; it works once, for one minute "
        "(run `pocolobby settings` again for another):"
    )
    print(f"http://127.0.0.1:{port}/#ticket={ticket}")
    return 0


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
        print(connect(args.config, args.name, Path.cwd(), host=args.host, deliver=args.deliver))
    except ConnectError as exc:
        raise CliError(str(exc)) from None
    return 0


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


def backup_cmd(args: argparse.Namespace) -> int:
    from pocolobby import backup

    os.umask(0o077)  # a backup holds every token hash and message: private from creation

    url = os.environ.get("DATABASE_URL", "")
    destination = Path(args.to).expanduser().resolve() if args.to else None
    if args.keep is not None and args.keep < 1:
        raise CliError("--keep must be at least 1")
    data_dir = config.data_dir()
    take = backup.take_backup
    if url and not url.startswith("sqlite"):
        _setup_django()  # the connection settings, parsed as the broker parses them
        from pocolobby import pg_backup

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
        data = _call("POST", "/restore/finish")
        print(
            f"restore finished: agents admitted again (incarnation {data['incarnation']}); "
            f"{data['uncertain']} pending copies are listed to their agents as uncertain work"
        )
        return 0
    if not args.backup:
        raise CliError("name the BACKUP to restore, or pass --finish")
    os.umask(0o077)  # the restored store, its attachments and configurations are private
    _setup_django()
    from pocolobby.restore import RestoreFailed, RestoreRefused, restore

    configs = Path(args.configs_dir or config.data_dir() / "restored-configs").expanduser()
    try:
        report = restore(args.backup, configs.resolve(), _broker_url())
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
        _setup_django()
        # local: the store's checks are usable only after django.setup() above
        from lobbies.storage import IncompatibleStore, diagnose_configured

        refused = f"run `manage {name}`"
        _lock_store(f"manage {name}", refused)
        try:
            diagnosis = diagnose_configured()
            if diagnosis.state == "new":
                raise CliError(
                    f"refusing to {refused}: the store is not initialised; `pocolobby init` "
                    "initialises it with its identity"
                )
        except (IncompatibleStore, CliError) as exc:
            _release_store()  # a lock file this refusal created goes with it
            if isinstance(exc, CliError):
                raise
            raise StoreRefused(f"refusing to {refused}: {exc}") from None
    # local: Django loads only for the commands that run it, after the settings module is set
    from django.core.management import execute_from_command_line

    execute_from_command_line(["pocolobby manage", *args.rest])
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="pocolobby", description=__doc__)
    parser.add_argument("--data-dir", help="data directory (default: $POCOLOBBY_DATA_DIR)")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("serve", help="run the broker")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument(
        "--insecure-http",
        action="store_true",
        help="allow --host on an address other machines reach, in plain http (only behind a "
        "TLS proxy on a trusted network)",
    )
    p.add_argument("--port", type=int, default=config.DEFAULT_PORT)
    p.add_argument("--data-dir", dest="serve_data_dir", help="data directory")
    p.set_defaults(func=serve)

    p = sub.add_parser("init", help="check the store, initialise or upgrade it, and exit")
    p.add_argument("--data-dir", dest="serve_data_dir", help="data directory")
    p.set_defaults(func=init)

    p = sub.add_parser("lobby", help="create, list or delete lobbies")
    lsub = p.add_subparsers(dest="lobby_command", required=True)
    lsub.add_parser("create").add_argument("name")
    lsub.add_parser("delete").add_argument("name")
    lsub.add_parser("list").add_argument("--json", action="store_true")
    lsub.add_parser("pause", help="pause every push in the lobby (sends still queue)").add_argument(
        "name"
    )
    lsub.add_parser("resume", help="resume the lobby's pushes").add_argument("name")
    cancel = lsub.add_parser("cancel-scheduled", help="cancel any scheduled message by id")
    cancel.add_argument("name")
    cancel.add_argument("message_id", type=int)
    p.set_defaults(func=lobby_cmd)

    p = sub.add_parser("agent", help="provision and manage agents")
    asub = p.add_subparsers(dest="agent_command", required=True)
    add = asub.add_parser("add", help="admit an agent and write its configuration file")
    add.add_argument("lobby")
    add.add_argument("name")
    add.add_argument("--config", required=True, help="where to write the agent's JSON (0600)")
    add.add_argument("--description", default="")
    add.add_argument("--role-file", help="a file with the agent's role instructions")
    add.add_argument("--manage-rooms", action="store_true")
    add.add_argument("--broadcast", action="store_true")
    lst = asub.add_parser("list")
    lst.add_argument("lobby")
    lst.add_argument("--json", action="store_true")
    rot = asub.add_parser("rotate", help="revoke the agent's tokens and write a new configuration")
    rot.add_argument("lobby")
    rot.add_argument("name")
    rot.add_argument("--config", required=True)
    role = asub.add_parser("set-role", help="replace the agent's role instructions from a file")
    role.add_argument("lobby")
    role.add_argument("name")
    role.add_argument("--role-file", required=True)
    perms = asub.add_parser("permissions", help="grant or withdraw broadcast / manage_rooms")
    perms.add_argument("lobby")
    perms.add_argument("name")
    perms.add_argument("--broadcast", choices=("yes", "no"))
    perms.add_argument("--manage-rooms", choices=("yes", "no"))
    for name in (
        "disable",
        "enable",
        "reset-runtime",
        "hand-over",
        "remove",
        "rest",
        "resume",
        "retry-notifications",
        "cancel-scheduled",
    ):
        q = asub.add_parser(name)
        q.add_argument("lobby")
        q.add_argument("name")
    p.set_defaults(func=agent_cmd)

    p = sub.add_parser("account", help="a hosted broker's accounts: who may sign in, and as what")
    acsub = p.add_subparsers(dest="account_command", required=True)
    aset = acsub.add_parser(
        "set", help="create or change an account (unnamed options stay as they are)"
    )
    aset.add_argument("email")
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

    p = sub.add_parser("attachments", help="a lobby's attachment metadata and usage (no content)")
    p.add_argument("lobby")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=attachments_cmd)

    p = sub.add_parser("status", help="agents, inboxes and bindings per lobby")
    p.add_argument("lobby", nargs="?")
    p.add_argument("--json", action="store_true")
    p.add_argument(
        "--wide", action="store_true", help="every column, as the API names them (over 100)"
    )
    p.set_defaults(func=status_cmd)

    p = sub.add_parser(
        "settings", help="print a one-minute link to this broker's dashboards and settings"
    )
    p.add_argument("--print", dest="print_only", action="store_true", help="(the default)")
    p.set_defaults(func=settings_cmd)

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

    p = sub.add_parser(
        "connect",
        help="write the host's MCP entry (.mcp.json, Codex's config.toml or Gemini's "
        ".gemini/settings.json) and print the "
        "launch command",
    )
    p.add_argument("--config", required=True, help="the agent's configuration file")
    p.add_argument("--name", default="pocolobby", help="the MCP server name (default pocolobby)")
    p.add_argument(
        "--host",
        choices=("claude", "codex", "gemini"),
        default="claude",
        help="claude: this directory's .mcp.json (default); codex: ~/.codex/config.toml "
        "($CODEX_HOME/config.toml); gemini: this directory's .gemini/settings.json",
    )
    p.add_argument(
        "--deliver",
        choices=("channel", "tmux"),
        default=None,
        help="how the bridge delivers pushes (default: channel for claude, tmux for codex)",
    )
    p.set_defaults(func=connect_cmd)

    p = sub.add_parser("statusline", help="Claude Code status line: plan usage to the broker")
    p.add_argument("--config", help="the agent's configuration file (or $POCOLOBBY_CONFIG)")
    p.set_defaults(func=statusline_cmd)

    p = sub.add_parser("hook", help="Claude Code UserPromptSubmit/Stop hook: turns and tokens")
    p.add_argument("--config", help="the agent's configuration file (or $POCOLOBBY_CONFIG)")
    p.set_defaults(func=hook_cmd)

    p = sub.add_parser("tokens", help="send a session transcript's token counts by hand")
    p.add_argument("--config", help="the agent's configuration file (or $POCOLOBBY_CONFIG)")
    p.add_argument("transcripts", nargs="+", help="session transcript .jsonl files")
    p.set_defaults(func=tokens_cmd)

    msg.add_parser(sub)

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
    p.add_argument("rest", nargs=argparse.REMAINDER)
    p.set_defaults(func=manage_cmd)
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
