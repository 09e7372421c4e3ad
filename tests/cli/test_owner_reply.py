"""`pocolobby lobby reply` and `lobby tell`: the operator answers an agent's question to the
owner from the command line, through the real CLI against a real broker subprocess."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli.test_msg_commands import answer, msg
from tests.server import Broker

pytest_plugins = ("tests.server_fixtures",)
pytestmark = pytest.mark.slow


def _waiting(broker: Broker, lobby: str) -> list[int]:
    status = json.loads(broker.cli_ok("status", lobby, "--json").stdout)
    (entry,) = status["lobbies"]
    return [q["message_id"] for q in entry["owner_questions"]]


def _from_owner(broker: Broker, config: Path) -> list[dict]:
    inbox = answer(msg(broker, config, "inbox", "--json"))["messages"]
    return [m for m in inbox if m["from"] == "owner"]


def test_the_operator_answers_a_question_to_the_owner(module_broker: Broker, tmp_path: Path):
    broker = module_broker
    configs = broker.provision("asks", ["backend", "lead"], tmp_path)
    backend, lead = configs["backend"].path, configs["lead"].path
    asked = answer(
        msg(broker, backend, "send", "owner", "Use SSO?", "--kind", "question", "--json")
    )
    question = asked["message_id"]
    assert _waiting(broker, "asks") == [question]
    status = broker.cli_ok("status", "asks").stdout
    assert f"    answer: pocolobby lobby reply asks {question} '...'" in status

    replied = broker.cli("lobby", "reply", "asks", str(question), "Yes, SSO.", "--important")
    assert replied.returncode == 0, replied.stderr
    (reply,) = _from_owner(broker, backend)
    assert replied.stdout.strip() == (
        f"answered backend's question {question} (message {reply['message_id']})"
    )
    assert reply["content"] == "Yes, SSO." and reply["reply_to"] == question
    assert reply["priority"] == "important"
    assert _waiting(broker, "asks") == []
    assert "asks you" not in broker.cli_ok("status", "asks").stdout

    # A second answer is stored too, and says there was a first.
    again = broker.cli_ok("lobby", "reply", "asks", str(question), "And MFA.").stdout
    assert f"you had answered it before, in message {reply['message_id']}" in again

    # `tell` writes as the owner and answers nothing: the lead's question still waits.
    later = answer(msg(broker, lead, "send", "owner", "Ship?", "--kind", "request", "--json"))
    told = broker.cli_ok("lobby", "tell", "asks", "lead", "Hold on.").stdout
    (note,) = _from_owner(broker, lead)
    assert told.strip() == f"sent to lead as the owner (message {note['message_id']})"
    assert note["reply_to"] is None
    assert _waiting(broker, "asks") == [later["message_id"]]


def test_a_reply_that_answers_no_question_is_refused_and_stores_nothing(
    module_broker: Broker, tmp_path: Path
):
    broker = module_broker
    configs = broker.provision("refuses", ["backend", "lead"], tmp_path)
    backend, lead = configs["backend"].path, configs["lead"].path
    question = answer(
        msg(broker, backend, "send", "owner", "Deploy now?", "--kind", "question", "--json")
    )["message_id"]
    to_lead = answer(msg(broker, backend, "send", "lead", "ping", "--json"))["message_id"]
    notice = msg(broker, backend, "send", "owner", "done", "--kind", "notice", "--json")
    notice_id = answer(notice)["message_id"]
    broker.provision("elsewhere", ["other"], tmp_path)

    refusals = {
        "999999": ("unknown_message", "no message 999999"),
        str(to_lead): ("not_a_question", "it was not sent to the owner"),
        str(notice_id): ("not_a_question", "it expects no reply (kind notice"),
    }
    for message_id, (code, reason) in refusals.items():
        refused = broker.cli("lobby", "reply", "refuses", message_id, "yes")
        assert refused.returncode == 1, refused.stdout
        assert code in refused.stderr and reason in refused.stderr, refused.stderr
    wrong_lobby = broker.cli("lobby", "reply", "elsewhere", str(question), "yes")
    assert wrong_lobby.returncode == 1
    assert f"message {question} is in lobby 'refuses', not 'elsewhere'" in wrong_lobby.stderr
    empty = broker.cli("lobby", "reply", "refuses", str(question), "")
    assert empty.returncode == 1 and "invalid_arguments" in empty.stderr
    assert "content" in empty.stderr

    assert _from_owner(broker, backend) == [] and _from_owner(broker, lead) == []
    assert _waiting(broker, "refuses") == [question]
