"""Role, checkpoints and the context a replacement session loads."""

from __future__ import annotations

import json
import uuid

import pytest
from django.test import Client

from lobbies import agent_selectors
from lobbies.actions.continuity import set_role
from lobbies.actions.runtime import claim_runtime
from lobbies.models import AuditEvent, Checkpoint, ReceiptEvent
from lobbies.push import frames
from tests.conftest import AgentClient


class Session:
    """An agent's bridge process as the HTTP API sees it: token plus runtime headers."""

    def __init__(self, agent: AgentClient, runtime_id: str | None = None) -> None:
        self.agent = agent
        self.runtime_id = runtime_id or str(uuid.uuid4())
        claim = claim_runtime(agent.agent, self.runtime_id, None)
        self.generation = claim.generation
        self.nonce = claim.agent.bootstrap_nonce

    def call(self, tool: str, **arguments) -> tuple[int, dict]:
        response = Client().post(
            f"/v1/tools/{tool}",
            data=json.dumps(arguments),
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {self.agent.token}",
            HTTP_X_POCOLOBBY_RUNTIME=self.runtime_id,
            HTTP_X_POCOLOBBY_GENERATION=str(self.generation),
        )
        return response.status_code, response.json()

    def ok(self, tool: str, **arguments) -> dict:
        status, body = self.call(tool, **arguments)
        assert status == 200, body
        return body


CHECKPOINT = {"objective": "ship auth", "next": ["review PR 42"], "open_messages": [3]}


def test_a_checkpoint_needs_the_bridge_runtime(backend):
    status, body = backend.call(
        "save_checkpoint", expected_revision=0, checkpoint=CHECKPOINT, covers_receipts_through=0
    )
    assert (status, body["error"]["code"]) == (409, "runtime_required")


def test_checkpoints_are_compare_and_swap(backend):
    session = Session(backend)
    first = session.ok(
        "save_checkpoint", expected_revision=0, checkpoint=CHECKPOINT, covers_receipts_through=0
    )
    assert first["revision"] == 1
    status, body = session.call(
        "save_checkpoint", expected_revision=0, checkpoint={"x": 1}, covers_receipts_through=0
    )
    assert (status, body["error"]["code"], body["error"]["revision"]) == (
        409,
        "checkpoint_conflict",
        1,
    )
    assert session.ok("read_checkpoint")["checkpoint"]["checkpoint"] == CHECKPOINT
    second = session.ok(
        "save_checkpoint", expected_revision=1, checkpoint={"x": 1}, covers_receipts_through=0
    )
    assert second["revision"] == 2


def test_a_superseded_process_cannot_write_the_checkpoint(backend):
    runtime = str(uuid.uuid4())
    old = Session(backend, runtime)
    new = Session(backend, runtime)  # the same conversation, restarted
    status, body = old.call(
        "save_checkpoint", expected_revision=0, checkpoint=CHECKPOINT, covers_receipts_through=0
    )
    assert (status, body["error"]["code"]) == (409, "generation_superseded")
    assert (
        new.ok(
            "save_checkpoint", expected_revision=0, checkpoint=CHECKPOINT, covers_receipts_through=0
        )["revision"]
        == 1
    )


def test_a_peer_cannot_write_another_agents_checkpoint(lead, backend):
    backend_session = Session(backend)
    impostor = Session(lead)
    impostor.runtime_id, impostor.generation = (
        backend_session.runtime_id,
        backend_session.generation,
    )
    status, body = impostor.call(
        "save_checkpoint", expected_revision=0, checkpoint=CHECKPOINT, covers_receipts_through=0
    )
    assert (status, body["error"]["code"]) == (409, "generation_superseded")
    assert not Checkpoint.objects.filter(agent=backend.agent).exists()


def test_a_checkpoint_covers_only_receipts_that_exist(backend):
    session = Session(backend)
    status, body = session.call(
        "save_checkpoint", expected_revision=0, checkpoint=CHECKPOINT, covers_receipts_through=3
    )
    assert status == 400 and "covers_receipts_through" in body["error"]["message"]


def test_receipts_and_checkpoint_commit_together_or_not_at_all(lead, backend):
    session = Session(backend)
    sent = lead.send("backend", "deploy", "r-1", kind="assignment")["message_id"]
    result = session.ok(
        "save_checkpoint",
        expected_revision=0,
        checkpoint=CHECKPOINT,
        covers_receipts_through=1,
        acknowledge_message_ids=[sent],
    )
    assert result["acknowledged"] == [sent] and result["receipt_sequence"] == 1
    again = lead.send("backend", "and this", "r-2")["message_id"]
    status, _ = session.call(
        "save_checkpoint",
        expected_revision=0,  # stale: nothing of this call may stick
        checkpoint=CHECKPOINT,
        covers_receipts_through=2,
        acknowledge_message_ids=[again],
    )
    assert status == 409
    assert ReceiptEvent.objects.filter(message_id=again).count() == 0


@pytest.mark.parametrize(
    ("checkpoint", "expected"),
    [({"note": "nul\u0000here"}, "NUL"), ({"blob": "x" * 40_000}, "32768")],
)
def test_bad_checkpoints_are_refused_naming_why(backend, checkpoint, expected):
    session = Session(backend)
    status, body = session.call(
        "save_checkpoint", expected_revision=0, checkpoint=checkpoint, covers_receipts_through=0
    )
    assert status == 400 and expected in body["error"]["message"]
    assert not Checkpoint.objects.exists()


def test_context_carries_role_checkpoint_inbox_and_uncertain_work(lead, backend):
    set_role("my-team", "backend", "You own the API. Never deploy on Fridays.")
    session = Session(backend)
    ids = [lead.send("backend", f"task {n}", f"r-{n}")["message_id"] for n in range(30)]
    session.ok("acknowledge_messages", message_ids=ids[:2])
    session.ok(
        "save_checkpoint", expected_revision=0, checkpoint=CHECKPOINT, covers_receipts_through=2
    )
    session.ok("acknowledge_messages", message_ids=ids[2:29])  # 27 uncertain receipts

    context = session.ok("get_context")
    assert context["role"].startswith("You own the API")
    assert context["checkpoint"]["revision"] == 1 and context["checkpoint"]["age_seconds"] >= 0
    assert context["receipt_sequence"] == 29
    uncertain = context["uncertain"]
    assert uncertain["total"] == 27 and uncertain["covered_through"] == 2
    assert [m["content"] for m in uncertain["messages"]] == [f"task {n}" for n in range(2, 7)]
    assert len(uncertain["headers"]) == 20 and "content" not in uncertain["headers"][0]
    rest = session.ok("get_context", cursor=uncertain["next_cursor"])["uncertain"]
    assert [m["message_id"] for m in rest["messages"]] == ids[27:29]
    assert rest["next_cursor"] is None
    assert (
        context["inbox"]["pending"] == 1 and context["inbox"]["first"][0]["message_id"] == ids[29]
    )
    assert any("checkpoint_revision 1" in line for line in context["guidance"])
    assert any("27 acknowledged messages are not covered" in line for line in context["guidance"])
    guide = {t["name"]: t for t in context["tool_guide"]["tools"]}
    assert "client_request_id" in guide["send_message"]["arguments"]
    assert context["tool_guide"]["revision"]
    assert context["broker"]["event_version"] == 5 and context["broker"]["process_id"]
    assert "nonce" not in json.dumps(context["runtime"])


def test_a_session_that_never_checkpointed_is_told_so(backend):
    session = Session(backend)
    guidance = session.ok("get_context")["guidance"]
    assert any("never saved a checkpoint" in line for line in guidance)


def test_ready_is_stale_after_a_checkpoint_saved_since_the_context(backend):
    session = Session(backend)
    loaded = session.ok("get_context")["checkpoint"]
    assert loaded is None
    session.ok(
        "save_checkpoint", expected_revision=0, checkpoint=CHECKPOINT, covers_receipts_through=0
    )
    status, body = session.call("ready", nonce=session.nonce, checkpoint_revision=0)
    assert (status, body["error"]["code"]) == (409, "stale_checkpoint")
    revision = session.ok("get_context")["checkpoint"]["revision"]
    assert session.ok("ready", nonce=session.nonce, checkpoint_revision=revision)["ready"]


def test_the_owner_sets_the_role_and_it_is_audited(backend):
    response = Client().post(
        "/v1/admin/lobbies/my-team/agents/backend/role",
        data=json.dumps({"role": "Review everything."}),
        content_type="application/json",
        HTTP_AUTHORIZATION="Bearer pla_test-admin-token",
    )
    assert response.status_code == 200
    assert backend.ok("get_context")["role"] == "Review everything."
    assert AuditEvent.objects.filter(action="role_set", agent_id="backend").exists()


def test_ready_records_the_revision_the_session_loaded(backend):
    first = Session(backend)
    first.ok(
        "save_checkpoint", expected_revision=0, checkpoint=CHECKPOINT, covers_receipts_through=0
    )
    second = Session(backend, first.runtime_id)  # the conversation resumed: a new generation
    context = second.ok("get_context")
    assert context["runtime"]["loaded_checkpoint_revision"] is None  # not ready yet
    second.ok("ready", nonce=second.nonce, checkpoint_revision=1)
    assert second.ok("get_context")["runtime"]["loaded_checkpoint_revision"] == 1
    (entry,) = agent_selectors.status("my-team")["lobbies"][0]["agents"][:1]
    assert (entry["agent_id"], entry["loaded_checkpoint_revision"]) == ("backend", 1)


def test_the_bootstrap_notice_says_to_save_a_checkpoint_after_ready(lead, backend):
    ids = [lead.send("backend", f"task {n}", f"r-{n}")["message_id"] for n in range(2)]
    first = Session(backend)
    first.ok("acknowledge_messages", message_ids=ids)
    second = Session(backend, first.runtime_id)
    notice = frames.bootstrap_frame(backend.agent.pk, second.generation)
    assert f"ready with nonce {second.nonce}" in notice["content"]
    assert "then save a checkpoint with covers_receipts_through 2" in notice["content"]


def test_a_resumed_conversations_greeting_is_deduplicated_by_its_hello_key(lead, backend):
    first = Session(backend)
    key = f"hello:backend:{first.runtime_id}"
    context = first.ok("get_context")
    assert context["runtime"]["hello_request_id"] == key
    assert any(key in line for line in context["guidance"])
    greeting = {"to": "lead", "content": "backend is back", "client_request_id": key}
    sent = first.ok("send_message", **greeting)
    resumed = Session(backend, first.runtime_id)  # a restart of the same conversation
    assert resumed.ok("get_context")["runtime"]["hello_request_id"] == key
    again = resumed.ok("send_message", **greeting)
    assert again["message_id"] == sent["message_id"]
    assert [m["content"] for m in lead.ok("get_messages")["messages"]] == ["backend is back"]


def test_a_bootstrap_nonce_is_safe_to_pass_as_a_shell_argument(backend: AgentClient):
    """`pocolobby msg ready <nonce>`: a nonce starting with "-" was read as an option (a URL-safe
    one did, one claim in 64). Every claim's nonce is hex."""
    nonces = {Session(backend).nonce for _ in range(40)}
    assert len(nonces) == 40
    for nonce in nonces:
        assert len(nonce) == 24 and set(nonce) <= set("0123456789abcdef"), nonce
