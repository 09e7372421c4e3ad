"""Durable sends per second through the HTTP API, against raw sqlite3 writing the same rows.

    .venv/bin/python benchmarks/send_throughput.py [--sends 2000] [--threads 8]

1. Starts the real broker (`python -m pocolobby serve`, embedded SQLite, a temporary data
   directory, send-rate and queue limits raised through the environment), provisions a lobby
   and agents with the real CLI, and times N `POST /v1/messages` from several threads, each
   with its own keep-alive http.client connection. Every send must answer 200 "stored".
2. In the same temporary directory (same disk), copies the broker's own DDL for the lobby,
   agent, message and delivery tables and indexes, and its lobby and agent rows, into a fresh
   SQLite file (WAL, synchronous=FULL, foreign keys on) and times N transactions from plain
   `sqlite3`, each bumping the lobby sequence and inserting one message row and one delivery
   row with every column of a message row and delivery row the broker wrote.
3. In the same directory, the minimal floor of a durable send: plain `sqlite3` (WAL,
   synchronous=FULL) committing one message row and one delivery row per transaction into
   two small tables with one unique index (sender, client_request_id): how close a send is
   to the disk rather than to our own schema.
4. Prints the rates, both ratios (targets: >= 0.15 against the broker's rows, >= 0.08
   against the minimal floor), the broker process's CPU time per timed send (user + system
   from /proc/<pid>/stat; target <= 1.0 ms) and the send latency (target p99 <= 30 ms).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import http.client
import json
import os
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from tests.server import AgentConfig, Broker  # noqa: E402

TARGET_RATIO = 0.15
TARGET_MINIMAL_RATIO = 0.08
TARGET_CPU_MS = 1.0
TARGET_P99_MS = 30.0
MINIMAL_SCHEMA = (
    "CREATE TABLE message (id INTEGER PRIMARY KEY, sender INTEGER NOT NULL,"
    " client_request_id TEXT NOT NULL, content TEXT NOT NULL, created_at TEXT NOT NULL)",
    "CREATE UNIQUE INDEX message_request ON message (sender, client_request_id)",
    "CREATE TABLE delivery (id INTEGER PRIMARY KEY, message_id INTEGER NOT NULL,"
    " recipient INTEGER NOT NULL, state TEXT NOT NULL)",
)
LOBBY = "bench"
CONTENT = "Review the auth change in api/session.py before the release branch is cut. " * 3
# In dependency order; the message's foreign keys name rooms and schedules too.
TABLES = (
    "lobbies_lobby",
    "lobbies_agent",
    "lobbies_room",
    "lobbies_schedule",
    "lobbies_message",
    "lobbies_delivery",
)


@dataclass
class ClientResult:
    latencies: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)


def recipient(agents: list[str], sender: str) -> str:
    return agents[(agents.index(sender) + 1) % len(agents)]


def run_client(
    config: AgentConfig,
    to: str,
    request_ids: list[str],
    start: threading.Barrier,
    result: ClientResult,
) -> None:
    # The standard library's client: a lighter load generator than httpx, so the two cores
    # this machine has go to the broker rather than to the benchmark's own threads.
    target = urlsplit(config.url)
    headers = {**config.headers, "Content-Type": "application/json"}
    try:
        client = http.client.HTTPConnection(target.hostname, target.port, timeout=60)
        client.request("GET", "/v1/agents", headers=headers)  # open the keep-alive connection
        client.getresponse().read()
        start.wait()
        for request_id in request_ids:
            body = json.dumps({"to": to, "content": CONTENT, "client_request_id": request_id})
            began = time.perf_counter()
            client.request("POST", "/v1/messages", body=body, headers=headers)
            response = client.getresponse()
            answer = response.read()
            result.latencies.append(time.perf_counter() - began)
            if response.status != 200 or json.loads(answer).get("duplicate") is not False:
                result.failures.append(f"{response.status} {answer[:200]!r}")
        client.close()
    except Exception as exc:  # reported by the main thread
        result.failures.append(repr(exc))
        start.abort()


def http_sends(
    configs: dict[str, AgentConfig], sends: int, threads: int, prefix: str
) -> tuple[float, list[float]]:
    """Send `sends` messages from `threads` clients at once; return (seconds, latencies)."""
    agents = sorted(configs)
    start = threading.Barrier(threads + 1, timeout=60)
    results = [ClientResult() for _ in range(threads)]
    workers = []
    for n in range(threads):
        sender = agents[n % len(agents)]
        request_ids = [f"{prefix}-{n}-{i}" for i in range(n, sends, threads)]
        workers.append(
            threading.Thread(
                target=run_client,
                args=(configs[sender], recipient(agents, sender), request_ids, start, results[n]),
                daemon=True,
            )
        )
    for worker in workers:
        worker.start()
    # A client that fails before the start breaks the barrier; its failure is reported below.
    with contextlib.suppress(threading.BrokenBarrierError):
        start.wait()
    began = time.perf_counter()
    for worker in workers:
        worker.join()
    elapsed = time.perf_counter() - began
    failures = [f for r in results for f in r.failures]
    if failures:
        raise SystemExit(f"{len(failures)} sends failed, e.g. {failures[0]}")
    latencies = [latency for r in results for latency in r.latencies]
    if len(latencies) != sends:
        raise SystemExit(f"expected {sends} answers, got {len(latencies)}")
    return elapsed, latencies


@dataclass
class BrokerRows:
    """The broker's DDL for the tables a send writes, and real rows to copy from."""

    schema: list[str]
    lobby: dict[str, Any]
    agents: list[dict[str, Any]]
    message: dict[str, Any]
    delivery: dict[str, Any]


def broker_rows(database: Path) -> BrokerRows:
    """Read the stopped broker's file: its CREATE statements and one row of each kind.

    Copying the DDL and real rows keeps the comparison honest as the schema grows: the raw
    transactions write every column the broker writes, under the same constraints and indexes.
    """
    conn = sqlite3.connect(f"{database.as_uri()}?mode=ro", uri=True)
    conn.row_factory = sqlite3.Row
    try:
        marks = ", ".join("?" for _ in TABLES)
        rows = conn.execute(
            f"SELECT type, tbl_name, sql FROM sqlite_master WHERE tbl_name IN ({marks}) "
            "AND sql IS NOT NULL",
            TABLES,
        ).fetchall()
        lobby = dict(
            conn.execute("SELECT * FROM lobbies_lobby WHERE name = ?", (LOBBY,)).fetchone()
        )
        agents = [
            dict(row)
            for row in conn.execute(
                "SELECT * FROM lobbies_agent WHERE lobby_id = ? ORDER BY id", (lobby["id"],)
            )
        ]
        message = dict(
            conn.execute(
                "SELECT * FROM lobbies_message WHERE lobby_id = ? ORDER BY id DESC LIMIT 1",
                (lobby["id"],),
            ).fetchone()
        )
        delivery = dict(
            conn.execute(
                "SELECT * FROM lobbies_delivery WHERE message_id = ?", (message["id"],)
            ).fetchone()
        )
    finally:
        conn.close()
    tables = sorted(
        (row for row in rows if row["type"] == "table"),
        key=lambda row: TABLES.index(row["tbl_name"]),
    )
    tables = [row["sql"] for row in tables]
    if len(tables) != len(TABLES):
        raise SystemExit(f"did not find the tables {TABLES} in {database}")
    indexes = [row["sql"] for row in rows if row["type"] == "index"]
    return BrokerRows(tables + indexes, lobby, agents, message, delivery)


def insert_sql(table: str, columns: list[str]) -> str:
    names = ", ".join(f'"{c}"' for c in columns)
    return f'INSERT INTO "{table}" ({names}) VALUES ({", ".join("?" for _ in columns)})'


def now_text() -> str:
    return datetime.now(UTC).isoformat(sep=" ")


def raw_sqlite_sends(path: Path, source: BrokerRows, sends: int) -> float:
    """One transaction per message: sequence bump + message row + delivery row. Seconds taken."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("PRAGMA foreign_keys=ON")
    for statement in source.schema:
        conn.execute(statement)
    lobby = {**source.lobby, "message_sequence": 0}
    conn.execute(insert_sql("lobbies_lobby", list(lobby)), list(lobby.values()))
    for agent in source.agents:
        conn.execute(insert_sql("lobbies_agent", list(agent)), list(agent.values()))
    lobby_id = lobby["id"]
    agents = [(agent["id"], agent["agent_id"]) for agent in source.agents]

    message_columns = [c for c in source.message if c != "id"]
    delivery_columns = [c for c in source.delivery if c != "id"]
    insert_message = insert_sql("lobbies_message", message_columns)
    insert_delivery = insert_sql("lobbies_delivery", delivery_columns)
    began = time.perf_counter()
    for i in range(sends):
        sender_id, sender_name = agents[i % len(agents)]
        recipient_id = agents[(i + 1) % len(agents)][0]
        request_id = f"raw-{i}"
        created = now_text()
        conn.execute("BEGIN IMMEDIATE")
        sequence = conn.execute(
            "UPDATE lobbies_lobby SET message_sequence = message_sequence + 1 "
            "WHERE id = ? RETURNING message_sequence",
            (lobby_id,),
        ).fetchone()[0]
        message = {
            **source.message,
            "sequence": sequence,
            "sender_id": sender_id,
            "sender_name": sender_name,
            "content": CONTENT,
            "client_request_id": request_id,
            "request_hash": hashlib.sha256(request_id.encode()).hexdigest(),
            "created_at": created,
        }
        message_id = conn.execute(insert_message, [message[c] for c in message_columns]).lastrowid
        delivery = {
            **source.delivery,
            "message_id": message_id,
            "recipient_id": recipient_id,
            "delivered_at": created,
        }
        conn.execute(insert_delivery, [delivery[c] for c in delivery_columns])
        conn.execute("COMMIT")
    elapsed = time.perf_counter() - began
    count = conn.execute("SELECT COUNT(*) FROM lobbies_delivery").fetchone()[0]
    conn.close()
    if count != sends:
        raise SystemExit(f"raw sqlite3 stored {count} deliveries, expected {sends}")
    return elapsed


def minimal_sqlite_sends(path: Path, sends: int, agents: int) -> float:
    """The physical floor: one message row + one delivery row per transaction. Seconds."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    for statement in MINIMAL_SCHEMA:
        conn.execute(statement)
    began = time.perf_counter()
    for i in range(sends):
        conn.execute("BEGIN IMMEDIATE")
        message_id = conn.execute(
            "INSERT INTO message (sender, client_request_id, content, created_at)"
            " VALUES (?, ?, ?, ?)",
            (i % agents, f"raw-{i}", CONTENT, now_text()),
        ).lastrowid
        conn.execute(
            "INSERT INTO delivery (message_id, recipient, state) VALUES (?, ?, 'pending')",
            (message_id, (i + 1) % agents),
        )
        conn.execute("COMMIT")
    elapsed = time.perf_counter() - began
    count = conn.execute("SELECT COUNT(*) FROM delivery").fetchone()[0]
    conn.close()
    if count != sends:
        raise SystemExit(f"minimal sqlite3 stored {count} deliveries, expected {sends}")
    return elapsed


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far, from /proc/<pid>/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    # after the command: state is field 3, utime 14 and stime 15 (1-based, man 5 proc)
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def thread_cpu(pid: int) -> dict[str, tuple[float, float]]:
    """Each thread's (user, system) CPU seconds so far, by the thread's name and id."""
    tick = os.sysconf("SC_CLK_TCK")
    threads: dict[str, tuple[float, float]] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            name, _, rest = (task / "stat").read_text().partition(" (")[2].rpartition(")")
            fields = rest.split()
            threads[f"{name}/{task.name}"] = (int(fields[11]) / tick, int(fields[12]) / tick)
    return threads


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sends", type=int, default=2000, help="timed sends (each phase)")
    parser.add_argument("--threads", type=int, default=8, help="concurrent HTTP clients")
    parser.add_argument("--agents", type=int, default=4, help="agents sending to each other")
    parser.add_argument("--warmup", type=int, default=100, help="untimed HTTP sends first")
    parser.add_argument("--profile", help="py-spy raw samples of the broker to this file")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="pocolobby-bench-") as temp:
        root = Path(temp)
        limits = {
            "POCOLOBBY_SENDS_PER_MINUTE": str(10 * (args.sends + args.warmup) + 1000),
            "POCOLOBBY_QUEUED_MESSAGES": str(10 * (args.sends + args.warmup) + 1000),
            "POCOLOBBY_LOG_LEVEL": "WARNING",
        }
        broker = Broker(root / "data", env=limits, log_path=root / "broker.log")
        broker.start()
        try:
            names = [f"agent-{n}" for n in range(args.agents)]
            configs = broker.provision(LOBBY, names, root / "configs")
            http_sends(configs, args.warmup, args.threads, "warmup")
            profiler = None
            if args.profile:  # py-spy samples the broker over the timed sends only
                profiler = subprocess.Popen(
                    [
                        str(Path(sys.executable).parent / "py-spy"),
                        "record",
                        "-p",
                        str(broker.pid),
                        "-f",
                        "raw",
                        "-o",
                        args.profile,
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
                time.sleep(1)
            cpu_before, threads_before = cpu_seconds(broker.pid), thread_cpu(broker.pid)
            http_seconds, latencies = http_sends(configs, args.sends, args.threads, "timed")
            broker_cpu = cpu_seconds(broker.pid) - cpu_before
            threads_after = thread_cpu(broker.pid)
            if profiler is not None:
                profiler.send_signal(signal.SIGINT)
                profiler.wait(60)
        except BaseException:
            print(broker.log_text()[-4000:], file=sys.stderr)
            raise
        finally:
            broker.stop()
        source = broker_rows(broker.data_dir / "pocolobby.sqlite3")
        raw_seconds = raw_sqlite_sends(root / "raw.sqlite3", source, args.sends)
        minimal_seconds = minimal_sqlite_sends(root / "minimal.sqlite3", args.sends, args.agents)

    http_rate = args.sends / http_seconds
    raw_rate = args.sends / raw_seconds
    minimal_rate = args.sends / minimal_seconds
    ratio = http_rate / raw_rate
    minimal_ratio = http_rate / minimal_rate
    p99 = percentile(latencies, 0.99) * 1000
    cpu_ms = broker_cpu / args.sends * 1000

    def verdict(met: bool) -> str:
        return "met" if met else "NOT met"

    print(
        f"HTTP API    : {args.sends} durable sends in {http_seconds:.2f} s from "
        f"{args.threads} keep-alive clients = {http_rate:,.0f} sends/s "
        f"(latency p50 {statistics.median(latencies) * 1000:.1f} ms, p99 {p99:.1f} ms)"
    )
    print(
        f"raw sqlite3 : {args.sends} transactions (sequence bump + message + delivery, the "
        f"broker's rows and indexes, WAL, synchronous=FULL) in {raw_seconds:.2f} s = "
        f"{raw_rate:,.0f} transactions/s"
    )
    print(
        f"minimal     : {args.sends} transactions (one message row + one delivery row, two "
        f"small tables, one unique index, WAL, synchronous=FULL) in {minimal_seconds:.2f} s = "
        f"{minimal_rate:,.0f} transactions/s"
    )
    print(
        f"ratio       : {ratio:.3f} vs the broker's rows (target >= {TARGET_RATIO}: "
        f"{verdict(ratio >= TARGET_RATIO)})"
    )
    print(
        f"ratio       : {minimal_ratio:.3f} vs the minimal floor (target >= "
        f"{TARGET_MINIMAL_RATIO}: {verdict(minimal_ratio >= TARGET_MINIMAL_RATIO)})"
    )
    print(
        f"broker CPU  : {cpu_ms:.2f} ms per send (user + system over the timed sends; target "
        f"<= {TARGET_CPU_MS}: {verdict(cpu_ms <= TARGET_CPU_MS)})"
    )
    busy = sorted(
        (
            (
                user - threads_before.get(name, (0.0, 0.0))[0],
                system - threads_before.get(name, (0.0, 0.0))[1],
                name,
            )
            for name, (user, system) in threads_after.items()
        ),
        key=lambda row: -(row[0] + row[1]),
    )
    for user, system, name in busy:
        if user + system >= 0.01 * broker_cpu:
            print(
                f"  by thread : {name:<24} user {user / args.sends * 1000:.2f} ms, system "
                f"{system / args.sends * 1000:.2f} ms per send"
            )
    print(
        f"latency p99 : {p99:.1f} ms (target <= {TARGET_P99_MS:.0f}: "
        f"{verdict(p99 <= TARGET_P99_MS)})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
