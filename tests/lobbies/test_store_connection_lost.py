"""A broker on PostgreSQL whose database connections are cut (pg_terminate_backend, as a
database restart or a DBA would) while agents send answers every request `200` or `503
store_unavailable`, never a 500; a 503 retried under its client_request_id is stored exactly
once, and the broker serves again on fresh connections. (The probe saw 33 `500
internal_error` in a send flood.) A real broker on a PostgreSQL database of its own."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.postgres import admin, own_database, url
from tests.server import AgentConfig, Broker

pytestmark = pytest.mark.slow

SENDERS = 6
SENDS_EACH = 40
CUTS = 4


@pytest.fixture
def database() -> Iterator[str]:
    yield from own_database("pocolobby_cut")


def cut_connections(database: str) -> int:
    """Terminate every session of the broker's database (its requests', its locks'), waiting
    for each to end; how many there were."""
    with admin(database) as conn:
        return len(
            conn.execute(
                "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity "
                "WHERE datname = %s AND pid <> pg_backend_pid()",
                [database],
            ).fetchall()
        )


async def _sender(
    client: httpx.AsyncClient, broker: Broker, config: AgentConfig, statuses: Counter[int]
) -> None:
    for n in range(SENDS_EACH):
        body = {"to": "reader", "content": f"{config.agent} {n}", "client_request_id": f"{n}"}
        while True:
            answer = await client.post(
                f"{broker.url}/v1/tools/send_message", json=body, headers=config.headers
            )
            statuses[answer.status_code] += 1
            if answer.status_code != 503:
                break
            assert answer.json()["error"]["code"] == "store_unavailable"
            await asyncio.sleep(0.05)


async def _flood_and_cut(
    broker: Broker, configs: dict[str, AgentConfig], database: str
) -> tuple[Counter[int], int]:
    statuses: Counter[int] = Counter()
    cut = 0
    async with httpx.AsyncClient(timeout=30) as client:
        senders = [
            asyncio.create_task(_sender(client, broker, configs[f"s{i}"], statuses))
            for i in range(SENDERS)
        ]
        for step in range(1, CUTS + 1):
            answers = step * SENDERS * SENDS_EACH // (CUTS + 1)
            while sum(statuses.values()) < answers and not any(s.done() for s in senders):
                await asyncio.sleep(0.01)
            cut += await asyncio.to_thread(cut_connections, database)
        await asyncio.gather(*senders)
    return statuses, cut


def test_sends_while_the_database_connections_are_cut_answer_200_or_503_and_store_once(
    database: str, tmp_path: Path
):
    broker = Broker(tmp_path / "broker", env={"DATABASE_URL": url(database)}).start()
    try:
        names = ["reader", *(f"s{i}" for i in range(SENDERS))]
        configs = broker.provision("team", names, tmp_path / "configs")
        statuses, cut = asyncio.run(_flood_and_cut(broker, configs, database))
        assert set(statuses) <= {200, 503}, statuses
        assert cut >= CUTS, "no broker session was there to cut"
        with admin(database) as conn:
            stored = conn.execute(
                "SELECT a.agent_id, m.client_request_id, count(*) FROM lobbies_message m "
                "JOIN lobbies_agent a ON a.id = m.sender_id GROUP BY 1, 2"
            ).fetchall()
        assert len(stored) == SENDERS * SENDS_EACH
        assert all(count == 1 for _, _, count in stored)
        log = broker.log_text()
        assert "internal error on" not in log and "answered 503" in log, log[-3000:]
    finally:
        broker.stop()
