"""`pocolobby msg`: an agent without MCP through the real CLI against a real broker subprocess."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.server import REPO_ROOT, Broker

pytest_plugins = ("tests.server_fixtures",)
pytestmark = pytest.mark.slow


def msg(
    broker: Broker, config: Path, *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    command, *rest = args
    return subprocess.run(
        [sys.executable, "-m", "pocolobby", "msg", command, "--config", str(config), *rest],
        cwd=REPO_ROOT,
        env=broker.cli_env(),
        input=stdin if stdin is not None else "",
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def answer(result: subprocess.CompletedProcess[str]) -> dict:
    return json.loads(result.stdout)


def test_send_read_acknowledge_round_trip_in_text_and_json(module_broker: Broker, tmp_path: Path):
    configs = module_broker.provision("shell-trip", ["lead", "coder"], tmp_path)
    lead, coder = configs["lead"].path, configs["coder"].path

    sent = msg(module_broker, lead, "send", "coder", "fix the parser", "--priority", "important")
    assert sent.returncode == 0, sent.stderr
    assert "stored for coder (pending)" in sent.stdout
    assert "request id: msg-" in sent.stdout

    inbox = msg(module_broker, coder, "inbox")
    assert inbox.returncode == 0, inbox.stderr
    assert "lead -> coder [important]" in inbox.stdout
    assert "    fix the parser" in inbox.stdout

    listed = answer(msg(module_broker, coder, "inbox", "--json"))
    (message,) = listed["messages"]
    message_id = message["message_id"]
    assert message["content"] == "fix the parser" and message["from"] == "lead"

    acked = msg(module_broker, coder, "ack", str(message_id), "999999")
    assert acked.returncode == 2, acked.stderr
    assert f"acknowledged: {message_id}" in acked.stdout and "unknown: 999999" in acked.stdout
    assert "not acknowledged, not pending for you: 999999 (the rest were)" in acked.stderr
    assert msg(module_broker, coder, "ack", str(message_id)).returncode == 0
    assert answer(msg(module_broker, coder, "inbox", "--json"))["messages"] == []
    assert "no pending messages" in msg(module_broker, coder, "inbox").stdout

    history = answer(msg(module_broker, lead, "history", "--query", "PARSER", "--json"))
    assert [m["message_id"] for m in history["messages"]] == [message_id]
    assert history["messages"][0]["recipients"][0]["delivery_state"] == "seen"


def test_content_from_standard_input_keeps_its_lines(module_broker: Broker, tmp_path: Path):
    configs = module_broker.provision("shell-stdin", ["lead", "coder"], tmp_path)
    text = "line one\n$(not a command) `either`\n"
    sent = msg(module_broker, configs["lead"].path, "send", "coder", "-", "--json", stdin=text)
    assert sent.returncode == 0, sent.stderr
    (message,) = answer(msg(module_broker, configs["coder"].path, "inbox", "--json"))["messages"]
    assert message["content"] == text


def test_a_retry_with_the_printed_request_id_returns_the_original(
    module_broker: Broker, tmp_path: Path
):
    configs = module_broker.provision("shell-retry", ["lead", "coder"], tmp_path)
    lead = configs["lead"].path
    first = answer(msg(module_broker, lead, "send", "coder", "deploy at noon", "--json"))
    request_id = first["client_request_id"]
    assert first["duplicate"] is False

    again = msg(module_broker, lead, "send", "coder", "deploy at noon", "--request-id", request_id)
    assert again.returncode == 0, again.stderr
    assert f"message {first['message_id']} already stored (a retry)" in again.stdout

    other = msg(module_broker, lead, "send", "coder", "deploy at one", "--request-id", request_id)
    assert other.returncode == 2
    assert "idempotency_conflict" in other.stderr
    inbox = answer(msg(module_broker, configs["coder"].path, "inbox", "--json"))
    assert [m["content"] for m in inbox["messages"]] == ["deploy at noon"]


def test_a_refusal_exits_2_names_the_error_and_stores_nothing(
    module_broker: Broker, tmp_path: Path
):
    configs = module_broker.provision("shell-refused", ["lead", "coder"], tmp_path)
    lead = configs["lead"].path

    nobody = msg(module_broker, lead, "send", "nobody", "hello", "--json")
    assert nobody.returncode == 2
    refused = answer(nobody)
    assert refused["outcome"] == "refused" and refused["status"] == 404
    assert refused["error"]["code"] == "unknown_recipient"
    assert "nothing stored" in nobody.stderr

    bad_fields = msg(module_broker, lead, "send", "coder", "x", "--fields", '{"colour": "red"}')
    assert bad_fields.returncode == 2 and "400" in bad_fields.stderr
    deep = "[" * 5000 + "]" * 5000
    deep_fields = msg(module_broker, lead, "send", "coder", "x", "--fields", deep)
    assert deep_fields.returncode != 0 and "Traceback" not in deep_fields.stderr
    assert "--fields nests JSON deeper than 64 levels" in deep_fields.stderr
    query_in_inbox = msg(module_broker, lead, "history", "--limit", "0")
    assert query_in_inbox.returncode == 2 and "400" in query_in_inbox.stderr

    assert answer(msg(module_broker, lead, "history", "--json"))["messages"] == []


def test_status_and_context(module_broker: Broker, tmp_path: Path):
    configs = module_broker.provision("shell-context", ["lead", "coder"], tmp_path)
    coder = configs["coder"].path
    assert msg(module_broker, coder, "status", "reviewing PR 7").stdout.strip() == (
        "status: reviewing PR 7"
    )
    msg(module_broker, configs["lead"].path, "send", "coder", "ping")

    context = msg(module_broker, coder, "context")
    assert context.returncode == 0, context.stderr
    assert "agent coder in lobby shell-context" in context.stdout
    assert "inbox: 1 pending" in context.stdout
    assert answer(msg(module_broker, coder, "context", "--json"))["agent_id"] == "coder"
    assert msg(module_broker, coder, "status", "").stdout.strip() == "status cleared"


def test_a_missing_configuration_exits_1(module_broker: Broker, tmp_path: Path):
    result = msg(module_broker, tmp_path / "absent.json", "inbox")
    assert result.returncode == 1 and "no agent configuration" in result.stderr


@pytest.fixture
def silent_broker() -> Iterator[str]:
    """A TCP listener that accepts each request and hangs up without answering."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    stop = threading.Event()

    def drop() -> None:
        while not stop.is_set():
            try:
                connection, _ = listener.accept()
            except TimeoutError:
                continue
            connection.recv(65536)
            connection.close()

    thread = threading.Thread(target=drop, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    stop.set()
    thread.join()
    listener.close()


def test_no_answer_exits_3_and_says_to_retry_with_the_same_id(
    module_broker: Broker, tmp_path: Path, silent_broker: str
):
    configs = module_broker.provision("shell-unknown", ["lead", "coder"], tmp_path)
    data = json.loads(configs["lead"].path.read_text())
    hung_up = tmp_path / "hung-up.json"
    hung_up.write_text(json.dumps({**data, "url": silent_broker}))

    result = msg(module_broker, hung_up, "send", "coder", "hello", "--request-id", "r-1")
    assert result.returncode == 3
    assert "may have been stored; retry with --request-id r-1" in result.stderr

    closed = tmp_path / "closed.json"
    port = socket.create_server(("127.0.0.1", 0))
    closed.write_text(json.dumps({**data, "url": f"http://127.0.0.1:{port.getsockname()[1]}"}))
    port.close()
    never = msg(module_broker, closed, "send", "coder", "hello", "--json")
    assert never.returncode == 3
    assert answer(never)["transport"] == "not_sent"
    assert f"retry with --request-id {answer(never)['client_request_id']}" in never.stderr


def test_a_broker_that_is_down_is_named_with_the_next_step_and_a_read_is_not_called_a_send(
    module_broker: Broker, tmp_path: Path
):
    configs = module_broker.provision("shell-down", ["lead"], tmp_path)
    data = json.loads(configs["lead"].path.read_text())
    port = socket.create_server(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{port.getsockname()[1]}"
    port.close()
    down = tmp_path / "down.json"
    down.write_text(json.dumps({**data, "url": url}))

    inbox = msg(module_broker, down, "inbox")
    assert inbox.returncode == 3
    assert f"the broker at {url} was not reached" in inbox.stderr
    assert "nothing was read or changed" in inbox.stderr and "not sent" not in inbox.stderr
    assert f"pocolobby doctor --config {down}" in inbox.stderr
    sent = msg(module_broker, down, "send", "lead", "hello", "--request-id", "r-2")
    assert "nothing was sent" in sent.stderr and "retry with --request-id r-2" in sent.stderr


def test_a_refused_token_says_to_ask_for_a_new_configuration(module_broker: Broker, tmp_path: Path):
    configs = module_broker.provision("shell-token", ["lead"], tmp_path)
    data = json.loads(configs["lead"].path.read_text())
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps({**data, "token": "plt_" + "x" * 40}))

    inbox = msg(module_broker, wrong, "inbox")
    assert inbox.returncode == 2
    assert "refused (401 invalid_token)" in inbox.stderr
    assert f"the token in {wrong} is not one this broker knows" in inbox.stderr
    assert "ask the operator for a new configuration file" in inbox.stderr
    assert "pocolobby doctor" in inbox.stderr and "plt_xxx" not in inbox.stderr


def _png(path: Path) -> bytes:
    # local: Pillow only to draw the test's own image
    from PIL import Image

    Image.new("RGB", (40, 30), (200, 40, 90)).save(path, format="PNG")
    return path.read_bytes()


def test_send_attaches_a_file_under_the_bridges_rules_and_the_recipient_gets_its_bytes(
    module_broker: Broker, tmp_path: Path
):
    import httpx  # local: the recipient downloads over the HTTP route itself

    configs = module_broker.provision("shell-files", ["lead", "coder"], tmp_path)
    shot = tmp_path / "before-after.png"
    data = _png(shot)
    sent = msg(
        module_broker,
        configs["lead"].path,
        "send",
        "coder",
        "see the shot",
        "--attach",
        str(shot),
        "--json",
    )
    assert sent.returncode == 0, sent.stderr
    (described,) = answer(sent)["attachments"]
    assert (described["name"], described["media_type"]) == ("before-after.png", "image/png")

    inbox = msg(module_broker, configs["coder"].path, "inbox")
    assert f'attachment {described["id"]}: "before-after.png" (image/png' in inbox.stdout
    token = json.loads(configs["coder"].path.read_text())["token"]
    got = httpx.get(
        f"{module_broker.url}/v1/attachments/{described['id']}",
        headers={"Authorization": f"Bearer {token}"},
    )
    assert got.status_code == 200 and got.content == data


def test_a_path_the_rules_refuse_sends_nothing_and_exits_refused(
    module_broker: Broker, tmp_path: Path
):
    configs = module_broker.provision("shell-attach-refused", ["lead", "coder"], tmp_path)
    hidden = tmp_path / ".env"
    hidden.write_text("TOKEN=1\n")
    refused = msg(
        module_broker, configs["lead"].path, "send", "coder", "here", "--attach", str(hidden)
    )
    assert refused.returncode == 2
    assert "local file rule" in refused.stderr and "Nothing was sent" in refused.stderr
    history = answer(msg(module_broker, configs["lead"].path, "history", "--json"))
    assert history["messages"] == []


def test_requests_sets_and_clears_what_the_agent_waits_on_from_the_owner(
    module_broker: Broker, tmp_path: Path
):
    configs = module_broker.provision("shell-requests", ["lead", "coder"], tmp_path)
    coder = configs["coder"].path

    waiting = msg(module_broker, coder, "requests", "2", "approve the deploy; review PR 7")
    assert waiting.returncode == 0, waiting.stderr
    assert waiting.stdout.strip() == "waiting on the owner for 2: approve the deploy; review PR 7"
    assert _owner_requests(module_broker, "shell-requests", "coder") == {
        "count": 2,
        "line": "approve the deploy; review PR 7",
    }

    blank = msg(module_broker, coder, "requests", "1")
    assert blank.returncode == 2 and "400" in blank.stderr

    cleared = msg(module_broker, coder, "requests", "0")
    assert cleared.returncode == 0, cleared.stderr
    assert cleared.stdout.strip() == "owner requests cleared"
    assert _owner_requests(module_broker, "shell-requests", "coder") is None


def _owner_requests(broker: Broker, lobby: str, agent: str) -> dict | None:
    listed = json.loads(broker.cli_ok("agent", "list", lobby, "--json").stdout)
    (entry,) = [a for a in listed["agents"] if a["agent_id"] == agent]
    requests = entry["owner_requests"]
    return requests and {"count": requests["count"], "line": requests["line"]}
