"""The operator's CLI (`python -m pocolobby ...`) against a real broker subprocess."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import httpx
import pytest

from tests.bridge_client import Bridge as StreamBridge
from tests.server import AgentConfig, Broker, BrokerFactory

# The `module_broker` and `broker_factory` fixtures.
pytest_plugins = ("tests.server_fixtures",)
pytestmark = pytest.mark.slow


def agents_status(broker: Broker, token: str) -> tuple[int, dict]:
    """GET /v1/agents with an agent token: (HTTP status, JSON body)."""
    response = httpx.get(
        f"{broker.url}/v1/agents", headers={"Authorization": f"Bearer {token}"}, timeout=10
    )
    return response.status_code, response.json()


def add_agent(broker: Broker, lobby: str, name: str, directory: Path) -> AgentConfig:
    path = directory / f"{name}.json"
    result = broker.cli("agent", "add", lobby, name, "--config", str(path))
    assert result.returncode == 0, result.stderr
    return AgentConfig.read(path)


def assert_one_line_error(result, *fragments: str) -> None:
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("pocolobby: "), lines[0]
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def test_agent_add_writes_a_private_config_and_prints_no_secret(
    module_broker: Broker, tmp_path: Path
):
    broker = module_broker
    assert broker.cli("lobby", "create", "add-team").returncode == 0
    path = tmp_path / "backend.json"

    result = broker.cli("agent", "add", "add-team", "backend", "--config", str(path))

    assert result.returncode == 0, result.stderr
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    data = json.loads(path.read_text())
    assert set(data) == {"url", "token", "lobby", "agent"}
    assert data["url"] == broker.url
    assert (data["lobby"], data["agent"]) == ("add-team", "backend")
    assert data["token"].startswith("plt_")
    assert len(data["token"]) > 40
    assert data["token"] not in result.stdout + result.stderr
    assert broker.admin_token not in result.stdout + result.stderr
    assert str(path) in result.stdout
    # No temporary file is left beside the config.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["backend.json"]
    # The written token is the agent's working credential.
    status, body = agents_status(broker, data["token"])
    assert status == 200, body
    assert (body["lobby"], [a["agent_id"] for a in body["agents"]]) == ("add-team", ["backend"])


def test_agent_add_refuses_to_overwrite_an_existing_file(module_broker: Broker, tmp_path: Path):
    broker = module_broker
    assert broker.cli("lobby", "create", "overwrite-team").returncode == 0
    path = tmp_path / "taken.json"
    path.write_text("keep me\n")

    result = broker.cli("agent", "add", "overwrite-team", "backend", "--config", str(path))

    assert_one_line_error(result, str(path), "exists")
    assert path.read_text() == "keep me\n"
    # The refusal came before the broker was asked: no agent was admitted.
    listing = broker.cli("agent", "list", "overwrite-team", "--json")
    assert listing.returncode == 0, listing.stderr
    assert json.loads(listing.stdout)["agents"] == []


def test_agent_list_and_status_show_the_agent(module_broker: Broker, tmp_path: Path):
    broker = module_broker
    assert broker.cli("lobby", "create", "list-team").returncode == 0
    add_agent(broker, "list-team", "backend", tmp_path)
    add_agent(broker, "list-team", "frontend", tmp_path)

    listing = broker.cli("agent", "list", "list-team")
    assert listing.returncode == 0, listing.stderr
    header, *rows = listing.stdout.splitlines()
    assert header.split()[:4] == ["agent_id", "enabled", "pending", "held"]
    assert [row.split()[:4] for row in rows] == [
        ["backend", "True", "0", "0"],
        ["frontend", "True", "0", "0"],
    ]

    as_json = json.loads(broker.cli("agent", "list", "list-team", "--json").stdout)
    assert [(a["agent_id"], a["enabled"], a["active_credentials"]) for a in as_json["agents"]] == [
        ("backend", True, 1),
        ("frontend", True, 1),
    ]

    status = broker.cli("status", "list-team")
    assert status.returncode == 0, status.stderr
    lines = status.stdout.splitlines()
    assert lines[0] == "lobby list-team"
    assert lines[1].split() == [
        "agent",
        "on",
        "conn",
        "pending",
        "imp",
        "held",
        "idle",
        "attn",
        "via",
    ]
    assert [line.split()[0] for line in lines[2:]] == ["backend", "frontend"]
    assert max(len(line) for line in lines) <= 100
    wide = broker.cli("status", "list-team", "--wide").stdout.splitlines()
    assert "notification_attention_required" in wide[1] and "runtime_id" in wide[1]

    everything = broker.cli("status", "--json")
    assert everything.returncode == 0, everything.stderr
    lobbies = {lobby["name"]: lobby for lobby in json.loads(everything.stdout)["lobbies"]}
    assert [a["agent_id"] for a in lobbies["list-team"]["agents"]] == ["backend", "frontend"]


def test_rotate_writes_a_new_token_and_revokes_the_old_one(module_broker: Broker, tmp_path: Path):
    broker = module_broker
    assert broker.cli("lobby", "create", "rotate-team").returncode == 0
    old = add_agent(broker, "rotate-team", "backend", tmp_path)

    # Rotation may replace the agent's existing config file in place.
    result = broker.cli("agent", "rotate", "rotate-team", "backend", "--config", str(old.path))

    assert result.returncode == 0, result.stderr
    new = AgentConfig.read(old.path)
    assert stat.S_IMODE(old.path.stat().st_mode) == 0o600
    assert new.token != old.token
    assert (new.url, new.lobby, new.agent) == (broker.url, "rotate-team", "backend")
    assert new.token not in result.stdout + result.stderr
    assert old.token not in result.stdout + result.stderr
    status, body = agents_status(broker, old.token)
    assert (status, body["error"]["code"]) == (401, "token_revoked")
    assert agents_status(broker, new.token)[0] == 200

    # A fresh path works too, and revokes the token written a moment ago.
    other = tmp_path / "rotated-again.json"
    again = broker.cli("agent", "rotate", "rotate-team", "backend", "--config", str(other))
    assert again.returncode == 0, again.stderr
    assert agents_status(broker, new.token)[0] == 401
    assert agents_status(broker, AgentConfig.read(other).token)[0] == 200


def test_disable_refuses_the_token_and_enable_restores_it(module_broker: Broker, tmp_path: Path):
    broker = module_broker
    assert broker.cli("lobby", "create", "disable-team").returncode == 0
    config = add_agent(broker, "disable-team", "backend", tmp_path)

    result = broker.cli("agent", "disable", "disable-team", "backend")
    assert result.returncode == 0, result.stderr
    status, body = agents_status(broker, config.token)
    assert (status, body["error"]["code"]) == (403, "agent_disabled")
    listing = json.loads(broker.cli("agent", "list", "disable-team", "--json").stdout)
    assert listing["agents"][0]["enabled"] is False

    assert broker.cli("agent", "enable", "disable-team", "backend").returncode == 0
    assert agents_status(broker, config.token)[0] == 200


def test_reset_runtime_and_remove(module_broker: Broker, tmp_path: Path):
    broker = module_broker
    assert broker.cli("lobby", "create", "remove-team").returncode == 0
    config = add_agent(broker, "remove-team", "backend", tmp_path)

    reset = broker.cli("agent", "reset-runtime", "remove-team", "backend")
    assert reset.returncode == 0, reset.stderr
    assert reset.stdout.startswith("reset-runtime: backend ")
    assert json.loads(reset.stdout.split(" ", 2)[2]) == {
        "reset": "backend",
        "retired_runtime_id": None,
    }

    removed = broker.cli("agent", "remove", "remove-team", "backend")
    assert removed.returncode == 0, removed.stderr
    assert agents_status(broker, config.token)[0] == 401
    listing = json.loads(broker.cli("agent", "list", "remove-team", "--json").stdout)
    assert listing["agents"] == []


def test_hand_over_with_no_conversation_waiting_exits_1_and_says_so(
    module_broker: Broker, tmp_path: Path
):
    broker = module_broker
    assert broker.cli("lobby", "create", "handover-team").returncode == 0
    add_agent(broker, "handover-team", "backend", tmp_path)
    refused = broker.cli("agent", "hand-over", "handover-team", "backend")
    assert_one_line_error(
        refused, "no new conversation is waiting to take over backend", "(nothing_waiting)"
    )
    unknown = broker.cli("agent", "hand-over", "handover-team", "ghost")
    assert_one_line_error(unknown, "no agent 'ghost'")


def test_rest_resume_retry_and_permissions_from_the_command(module_broker: Broker, tmp_path: Path):
    broker = module_broker
    assert broker.cli("lobby", "create", "rest-team").returncode == 0
    add_agent(broker, "rest-team", "backend", tmp_path)
    for command in ("rest", "resume", "retry-notifications"):
        result = broker.cli("agent", command, "rest-team", "backend")
        assert result.returncode == 0, result.stderr
    perms = broker.cli("agent", "permissions", "rest-team", "backend", "--broadcast", "yes")
    assert perms.returncode == 0, perms.stderr
    assert perms.stdout.strip() == "backend: broadcast yes, manage_rooms no"
    twice = broker.cli("agent", "disable", "rest-team", "backend")
    assert twice.returncode == 0
    again = broker.cli("agent", "disable", "rest-team", "backend")
    assert again.returncode == 1 and "already disabled" in again.stderr


def test_lobby_delete_and_the_name_stays_retired(module_broker: Broker, tmp_path: Path):
    broker = module_broker
    assert broker.cli("lobby", "create", "doomed-team").returncode == 0
    config = add_agent(broker, "doomed-team", "backend", tmp_path)

    deleted = broker.cli("lobby", "delete", "doomed-team")
    assert deleted.returncode == 0, deleted.stderr
    assert "doomed-team" in deleted.stdout

    lobbies = json.loads(broker.cli("lobby", "list", "--json").stdout)["lobbies"]
    assert "doomed-team" not in [lobby["name"] for lobby in lobbies]
    assert agents_status(broker, config.token)[0] == 401

    again = broker.cli("lobby", "create", "doomed-team")
    assert_one_line_error(again, "doomed-team", "lobby_name_retired")

    gone = broker.cli("lobby", "delete", "doomed-team")
    assert_one_line_error(gone, "unknown_lobby")


def test_account_set_marks_an_operator_and_keeps_what_it_does_not_name(module_broker: Broker):
    broker = module_broker
    made = broker.cli("account", "set", " Op@Example.com", "--operator", "yes")
    assert made.returncode == 0, made.stderr
    assert made.stdout == (
        "created account op@example.com: enabled yes, may create lobbies no, operator yes; "
        "its email-code sign-in opens /admin/\n"
    )
    changed = broker.cli("account", "set", "op@example.com", "--may-create-lobbies", "yes")
    assert changed.stdout.startswith(
        "changed account op@example.com: enabled yes, may create lobbies yes, operator yes"
    )
    unmarked = broker.cli("account", "set", "op@example.com", "--operator", "no")
    assert unmarked.stdout.rstrip().endswith("operator no")
    assert_one_line_error(
        broker.cli("account", "set", "not-an-address", "--operator", "yes"), "invalid_email"
    )


def test_duplicate_lobby_and_agent_are_refused(module_broker: Broker, tmp_path: Path):
    broker = module_broker
    assert broker.cli("lobby", "create", "twice-team").returncode == 0
    assert_one_line_error(broker.cli("lobby", "create", "twice-team"), "lobby_exists")

    add_agent(broker, "twice-team", "backend", tmp_path)
    path = tmp_path / "second.json"
    result = broker.cli("agent", "add", "twice-team", "backend", "--config", str(path))
    assert_one_line_error(result, "agent_exists")
    assert not path.exists()


@pytest.mark.parametrize(
    "args",
    [
        ("agent", "list", "no-such-lobby"),
        ("agent", "disable", "no-such-lobby", "backend"),
        ("status", "no-such-lobby"),
        ("lobby", "delete", "no-such-lobby"),
    ],
)
def test_a_broker_refusal_exits_1_with_one_line(module_broker: Broker, args: tuple[str, ...]):
    result = module_broker.cli(*args)
    assert_one_line_error(result, "no lobby named 'no-such-lobby'", "(unknown_lobby)")


def test_agent_add_to_an_unknown_lobby_writes_nothing(module_broker: Broker, tmp_path: Path):
    path = tmp_path / "backend.json"
    result = module_broker.cli("agent", "add", "no-such-lobby", "backend", "--config", str(path))
    assert_one_line_error(result, "unknown_lobby")
    assert list(tmp_path.iterdir()) == []


def test_a_wrong_admin_token_is_refused(module_broker: Broker):
    result = module_broker.cli("lobby", "list", env={"POCOLOBBY_ADMIN_TOKEN": "pla_wrong"})
    assert_one_line_error(result, "admin token", "(invalid_token)")
    assert "pla_wrong" not in result.stderr


def test_a_stopped_broker_cannot_be_reached(broker_factory: BrokerFactory):
    broker = broker_factory()
    broker.stop()

    for args in (("lobby", "list"), ("lobby", "create", "late-team"), ("status",)):
        result = broker.cli(*args)
        assert_one_line_error(result, "cannot reach the broker", broker.url)
        assert broker.admin_token not in result.stderr


def test_a_killed_broker_cannot_be_reached(broker_factory: BrokerFactory):
    broker = broker_factory()
    broker.kill9()
    assert_one_line_error(broker.cli("status"), "cannot reach the broker")


def test_status_shows_each_agents_connection_and_pending_and_important_counts(
    module_broker: Broker, tmp_path: Path
):
    broker = module_broker
    assert broker.cli("lobby", "create", "count-team").returncode == 0
    sender = add_agent(broker, "count-team", "lead", tmp_path)
    add_agent(broker, "count-team", "backend", tmp_path)
    for n, priority in enumerate(["info", "important", "important"]):
        sent = httpx.post(
            f"{broker.url}/v1/messages",
            headers=sender.headers,
            json={
                "to": "backend",
                "content": f"note {n}",
                "client_request_id": f"r{n}",
                "priority": priority,
            },
        )
        assert sent.status_code == 200, sent.text

    status = broker.cli("status", "count-team")
    assert status.returncode == 0, status.stderr
    header, *rows = status.stdout.splitlines()[1:]
    columns = header.split()
    assert columns[:6] == ["agent", "on", "conn", "pending", "imp", "held"]
    table = {row.split()[0]: dict(zip(columns, row.split(), strict=False)) for row in rows}
    assert table["backend"]["conn"] == "no"
    assert (table["backend"]["pending"], table["backend"]["imp"]) == ("3", "2")
    assert (table["lead"]["pending"], table["lead"]["imp"]) == ("0", "0")
    as_json = json.loads(broker.cli("status", "count-team", "--json").stdout)
    backend = next(a for a in as_json["lobbies"][0]["agents"] if a["agent_id"] == "backend")
    assert (backend["connected"], backend["pending"], backend["important"]) == (False, 3, 2)


@pytest.mark.asyncio
async def test_status_shows_each_transport_and_a_line_for_held_notices(
    module_broker: Broker, tmp_path: Path
):
    configs = module_broker.provision("transport-team", ["paned", "plain", "quiet"], tmp_path)
    paned = await StreamBridge.connect(module_broker.url, configs["paned"].token)
    plain = await StreamBridge.connect(module_broker.url, configs["plain"].token)
    try:
        await paned.bootstrapped()
        await plain.bootstrapped()
        await paned.send(
            {
                "type": "delivery",
                "transport": "tmux",
                "held": True,
                "held_reason": "the agent is busy (no idle prompt)",
            }
        )
        await paned.roundtrip()  # the broker answered a heartbeat after the frame
        status = module_broker.cli("status", "transport-team")
        assert status.returncode == 0, status.stderr
        lines = status.stdout.splitlines()
        assert lines[1].split()[-1] == "via"
        assert {line.split()[0]: line.split()[-1] for line in lines[2:5]} == {
            "paned": "tmux",
            "plain": "channel",
            "quiet": "none",
        }
        held = {line.split()[0]: line.split()[5] for line in lines[2:5]}
        assert held == {"paned": "0+notices", "plain": "0", "quiet": "0"}
        assert lines[5].startswith("  paned: tmux notices held since ")
        assert lines[5].endswith(": the agent is busy (no idle prompt)")
    finally:
        await paned.close()
        await plain.close()


@pytest.mark.parametrize(
    "url", ["http://192.0.2.7:8787", "HTTP://broker.example", "http://0.0.0.0:8787"]
)
def test_the_admin_token_is_never_sent_over_plain_http_to_another_machine(
    module_broker: Broker, url: str
):
    """Issue 33: the operator's commands sent the admin token in clear to any host."""
    result = module_broker.cli("lobby", "list", env={"POCOLOBBY_URL": url})
    assert_one_line_error(result, f"POCOLOBBY_URL {url} is plain http", "Use the broker's https")
    assert "nothing was sent" in result.stderr
    assert module_broker.admin_token not in result.stderr
    # Loopback in plain http is this machine: it still works.
    local = module_broker.url.replace("127.0.0.1", "localhost")
    assert module_broker.cli("lobby", "list", env={"POCOLOBBY_URL": local}).returncode == 0
