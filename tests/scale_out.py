"""Brokers that scale out: what every broker of a cluster shares (PostgreSQL and Redis), and
what each answers. The fixtures that make the database and claim the Redis number are in
tests/scale_out_fixtures.py.
"""

from __future__ import annotations

from typing import Any

import httpx
import psycopg

from tests.server import Broker

PG_SERVER = "postgresql://postgres@127.0.0.1:5432"
REDIS_HOST, REDIS_PORT = "127.0.0.1", 6379


def admin_connection(dbname: str = "postgres") -> psycopg.Connection:
    return psycopg.connect(f"{PG_SERVER}/{dbname}", autocommit=True, connect_timeout=3)


def store_env(database: str, redis_db: int) -> dict[str, str]:
    """What every broker of the cluster shares: the store and the channel layer."""
    return {
        "DATABASE_URL": f"{PG_SERVER}/{database}",
        "REDIS_URL": f"redis://{REDIS_HOST}:{REDIS_PORT}/{redis_db}",
    }


def usage_of(broker: Broker, token: str, agent: str) -> Any:
    """The plan usage `list_agents` on this broker shows for `agent`."""
    answer = httpx.post(
        f"{broker.url}/v1/tools/list_agents",
        json={},
        headers={"Authorization": f"Bearer {token}"},
        timeout=10,
    )
    assert answer.status_code == 200, answer.text
    [entry] = [a for a in answer.json()["agents"] if a["agent_id"] == agent]
    return entry["usage"]
