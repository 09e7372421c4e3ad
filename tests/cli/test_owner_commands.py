"""Owner controls through the real CLI against a real broker subprocess."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.server import Broker

pytest_plugins = ("tests.server_fixtures",)
pytestmark = pytest.mark.slow


def test_owner_controls_from_the_command_line(module_broker: Broker, tmp_path: Path):
    broker = module_broker
    configs = broker.provision("owned", ["lead", "backend"], tmp_path)

    out = broker.cli_ok("agent", "permissions", "owned", "backend", "--broadcast", "yes").stdout
    assert "backend: broadcast yes, manage_rooms no" in out
    answer = httpx.post(
        f"{broker.url}/v1/tools/broadcast",
        json={"content": "hello all", "client_request_id": "c-1"},
        headers=configs["backend"].headers,
    )
    assert answer.status_code == 200, answer.text

    assert '"resting": true' in broker.cli_ok("agent", "rest", "owned", "backend").stdout
    assert '"resting": false' in broker.cli_ok("agent", "resume", "owned", "backend").stdout
    assert "retried" in broker.cli_ok("agent", "retry-notifications", "owned", "backend").stdout
    assert '"messages": 0' in broker.cli_ok("agent", "cancel-scheduled", "owned", "lead").stdout
    assert "paused" in broker.cli_ok("lobby", "pause", "owned").stdout
    assert "resumed" in broker.cli_ok("lobby", "resume", "owned").stdout
    missing = broker.cli("lobby", "cancel-scheduled", "owned", "424242")
    assert missing.returncode == 1 and "unknown_message" in missing.stderr
