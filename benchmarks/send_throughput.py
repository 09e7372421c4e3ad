"""Durable sends per second through the HTTP API, against raw sqlite3 writing the same rows.

    .venv/bin/python benchmarks/send_throughput.py [--sends 2000] [--threads 8]

1. Starts the real broker (`python -m pocolobby serve`, embedded SQLite, a temporary data
   directory, send-rate and queue limits raised through the environment), provisions a lobby
   and agents with the real CLI, and times N `POST /v1/messages` from several threads, each
   with its own keep-alive httpx client. Every send must answer 200 "stored".
2. In the same temporary directory (same disk), copies the broker's own DDL for the lobby,
   agent, message and delivery tables and indexes into a fresh SQLite file (WAL,
   synchronous=FULL, foreign keys on) and times N transactions from plain `sqlite3`, each
   bumping the lobby sequence and inserting one message row and one delivery row.
3. Prints both rates and their ratio; the target is a ratio of at least 0.15.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import httpx

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from tests.server import AgentConfig, Broker  # noqa: E402

TARGET_RATIO = 0.15
LOBBY = "bench"
CONTENT = "Review the auth change in api/session.py before the release branch is cut. " * 3
TABLES = ("lobbies_lobby", "lobbies_agent", "lobbies_message", "lobbies_delivery")


@dataclass
class ClientResult:
    latencies: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)


def recipient(agents: list[str], sender: str) -> str:
    return agents[(agents.index(sender) + 1) % len(agents)]


def run_client(
    config: AgentConfig, to: str, request_ids: list[str], start: threading.Barrier,
    result: ClientResult,
) -> None:
    with httpx.Client(base_url=config.url, headers=config.headers, timeout=60) as client:
        client.get("/v1/agents").raise_for_status()  # open the keep-alive connection
        start.wait()
        for request_id in request_ids:
            began = time.perf_counter()
            response = client.post(
                "/v1/messages",
                json={"to": to, "content": CONTENT, "client_request_id": request_id},
            )
            result.latencies.append(time.perf_counter() - began)
            if response.status_code != 200 or response.json().get("duplicate") is not False:
                result.failures.append(f"{response.status_code} {response.text[:200]}")


def http_sends(
    configs: dict[str, AgentConfig], sends: int, threads: int, prefix: str
) -> tuple[float, list[float]]:
    """Send `sends` messages from `threads` clients at once; return (seconds, latencies)."""
    agents = sorted(configs)
    start = threading.Barrier(threads + 1)
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


def broker_schema(database: Path) -> list[str]:
    """The broker's own CREATE TABLE / CREATE INDEX statements for the tables a send writes."""
    conn = sqlite3.connect(f"{database.as_uri()}?mode=ro", uri=True)
    try:
        rows = conn.execute(
            "SELECT type, sql FROM sqlite_master WHERE tbl_name IN (?, ?, ?, ?) "
            "AND sql IS NOT NULL",
            TABLES,
        ).fetchall()
    finally:
        conn.close()
    tables = [sql for kind, sql in rows if kind == "table"]
    indexes = [sql for kind, sql in rows if kind == "index"]
    ordered = sorted(tables, key=lambda sql: next(i for i, t in enumerate(TABLES) if t in sql))
    if len(ordered) != len(TABLES):
        raise SystemExit(f"did not find the tables {TABLES} in {database}")
    return ordered + indexes


def now_text() -> str:
    return datetime.now(UTC).isoformat(sep=" ")


def raw_sqlite_sends(path: Path, schema: list[str], sends: int, agents: int) -> float:
    """One transaction per message: sequence bump + message row + delivery row. Seconds taken."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("PRAGMA foreign_keys=ON")
    for statement in schema:
        conn.execute(statement)
    conn.execute(
        "INSERT INTO lobbies_lobby (name, created_at, message_sequence) VALUES (?, ?, 0)",
        (LOBBY, now_text()),
    )
    lobby_id = conn.execute("SELECT id FROM lobbies_lobby").fetchone()[0]
    agent_ids = []
    for n in range(agents):
        cursor = conn.execute(
            "INSERT INTO lobbies_agent (agent_id, description, role, enabled, manage_rooms, "
            "broadcast, status_line, owner_request_count, owner_request_line, "
            "receipt_sequence, runtime_generation, created_at, lobby_id) "
            "VALUES (?, '', '', 1, 0, 0, '', 0, '', 0, 0, ?, ?)",
            (f"agent-{n}", now_text(), lobby_id),
        )
        agent_ids.append(cursor.lastrowid)
    content_bytes = len(CONTENT.encode("utf-8"))
    began = time.perf_counter()
    for i in range(sends):
        sender = agent_ids[i % agents]
        to = agent_ids[(i + 1) % agents]
        request_id = f"raw-{i}"
        digest = hashlib.sha256(request_id.encode()).hexdigest()
        conn.execute("BEGIN IMMEDIATE")
        sequence = conn.execute(
            "UPDATE lobbies_lobby SET message_sequence = message_sequence + 1 "
            "WHERE id = ? RETURNING message_sequence",
            (lobby_id,),
        ).fetchone()[0]
        created = now_text()
        message_id = conn.execute(
            "INSERT INTO lobbies_message (sequence, sender_name, scope, kind, reply_expected, "
            "priority, content, content_bytes, fields, reply_to, correlation_id, "
            "client_request_id, request_hash, created_at, lobby_id, sender_id) "
            "VALUES (?, ?, 'direct', NULL, 0, 'info', ?, ?, ?, NULL, '', ?, ?, ?, ?, ?)",
            (sequence, f"agent-{i % agents}", CONTENT, content_bytes, json.dumps({}),
             request_id, digest, created, lobby_id, sender),
        ).lastrowid
        conn.execute(
            "INSERT INTO lobbies_delivery (state, held_reason, content_bytes, delivered_at, "
            "recipient_id, message_id) VALUES ('pending', NULL, ?, ?, ?, ?)",
            (content_bytes, created, to, message_id),
        )
        conn.execute("COMMIT")
    elapsed = time.perf_counter() - began
    count = conn.execute("SELECT COUNT(*) FROM lobbies_delivery").fetchone()[0]
    conn.close()
    if count != sends:
        raise SystemExit(f"raw sqlite3 stored {count} deliveries, expected {sends}")
    return elapsed


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sends", type=int, default=2000, help="timed sends (each phase)")
    parser.add_argument("--threads", type=int, default=8, help="concurrent HTTP clients")
    parser.add_argument("--agents", type=int, default=4, help="agents sending to each other")
    parser.add_argument("--warmup", type=int, default=100, help="untimed HTTP sends first")
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
            http_seconds, latencies = http_sends(configs, args.sends, args.threads, "timed")
        except BaseException:
            print(broker.log_text()[-4000:], file=sys.stderr)
            raise
        finally:
            broker.stop()
        schema = broker_schema(broker.data_dir / "pocolobby.sqlite3")
        raw_seconds = raw_sqlite_sends(root / "raw.sqlite3", schema, args.sends, args.agents)

    http_rate = args.sends / http_seconds
    raw_rate = args.sends / raw_seconds
    ratio = http_rate / raw_rate
    print(
        f"HTTP API    : {args.sends} durable sends in {http_seconds:.2f} s from "
        f"{args.threads} keep-alive clients = {http_rate:,.0f} sends/s "
        f"(latency p50 {statistics.median(latencies) * 1000:.1f} ms, "
        f"p99 {percentile(latencies, 0.99) * 1000:.1f} ms)"
    )
    print(
        f"raw sqlite3 : {args.sends} transactions (sequence bump + message + delivery, WAL, "
        f"synchronous=FULL) in {raw_seconds:.2f} s = {raw_rate:,.0f} transactions/s"
    )
    verdict = "met" if ratio >= TARGET_RATIO else "NOT met"
    print(f"ratio       : {ratio:.3f} (target >= {TARGET_RATIO}: {verdict})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
