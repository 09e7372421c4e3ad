"""Fixtures for brokers that scale out: a PostgreSQL database and a Redis database number of
the module's own, shared by every broker a test starts on them. A module that uses them
declares

    pytest_plugins = ("tests.scale_out_fixtures",)

Needs PostgreSQL on 127.0.0.1:5432 (user postgres, no password) and Redis on 127.0.0.1:6379;
the module is skipped when either is unreachable. The database is uniquely named (dropped at
the end); the Redis database number is claimed empty with a marker key (flushed at the end).
"""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Iterator

import psycopg
import pytest
import redis

from tests.scale_out import PG_SERVER, REDIS_HOST, REDIS_PORT, admin_connection

REDIS_CLAIM_KEY = "pocolobby-tests:scale-out-claim"


@pytest.fixture(scope="module")
def database() -> Iterator[str]:
    """A fresh PostgreSQL database for this module; dropped at teardown."""
    try:
        admin = admin_connection()
    except psycopg.Error as exc:
        pytest.skip(f"PostgreSQL is not reachable at {PG_SERVER}: {exc}")
    name = f"pocolobby_scale_{uuid.uuid4().hex[:12]}"
    with admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    yield name
    with admin_connection() as admin:
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", [name]
        )
        admin.execute(f'DROP DATABASE IF EXISTS "{name}"')


@pytest.fixture(scope="module")
def redis_db() -> Iterator[int]:
    """An empty Redis database number, claimed with a marker key; flushed at teardown."""
    claim = secrets.token_hex(8)
    try:
        redis.Redis(host=REDIS_HOST, port=REDIS_PORT, socket_connect_timeout=2).ping()
    except redis.RedisError as exc:
        pytest.skip(f"Redis is not reachable at {REDIS_HOST}:{REDIS_PORT}: {exc}")
    for number in range(15, 0, -1):
        client = redis.Redis(host=REDIS_HOST, port=REDIS_PORT, db=number)
        try:
            if client.set(REDIS_CLAIM_KEY, claim, nx=True, ex=3600):
                if client.dbsize() == 1:
                    break
                client.delete(REDIS_CLAIM_KEY)
        except redis.ResponseError:  # fewer databases configured than we tried
            pass
        client.close()
    else:
        pytest.skip("no empty Redis database number to claim")
    yield number
    client.flushdb()
    client.close()
