"""Pytest fixtures around `tests.server.Broker`; a test module that uses them declares

    pytest_plugins = ("tests.server_fixtures",)

Tests that use them start real server subprocesses: mark them `@pytest.mark.slow`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import pytest

from tests.server import Broker, BrokerFactory, with_empty_store


@pytest.fixture
def broker_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerFactory]:
    """Start brokers on demand (each with its own data dir and port); all stopped at teardown."""
    started: list[Broker] = []

    def start(env: Mapping[str, str] | None = None, name: str = "broker") -> Broker:
        data_dir = tmp_path_factory.mktemp(name)
        steered = env is not None and "DATABASE_URL" in env
        broker = Broker(data_dir if steered else with_empty_store(data_dir), env=env)
        started.append(broker)
        return broker.start()

    yield start
    for broker in started:
        broker.stop()


@pytest.fixture
def broker(broker_factory: BrokerFactory) -> Broker:
    """A running broker with default settings and a fresh data directory."""
    return broker_factory()


@pytest.fixture(scope="module")
def module_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    """One broker shared by a module's tests; they must use distinct lobby names."""
    broker = Broker(with_empty_store(tmp_path_factory.mktemp("module-broker"))).start()
    yield broker
    broker.stop()
