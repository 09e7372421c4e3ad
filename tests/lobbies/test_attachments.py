"""Attachments on the broker: uploads prove possession, sends claim them, access follows
delivery, retention collects content exactly when the spec says. Over the API routes."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import time_machine
from django.conf import settings
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

from lobbies.actions import operator
from lobbies.actions.retention import sweep
from lobbies.actions.runtime import claim_runtime
from lobbies.models import (
    Attachment,
    AttachmentContent,
    Message,
    MessageAttachment,
    PendingUpload,
    Schedule,
    ScheduleAttachment,
)
from lobbies.push import frames, timers
from tests.conftest import AgentClient

T0 = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 8
NOTES = b"# Research\n\nLong findings, in Markdown.\n"


@pytest.fixture(autouse=True)
def attachments_dir(tmp_path: Path):
    folder = tmp_path / "attachments"
    with override_settings(ATTACHMENTS_DIR=folder):
        yield folder


@pytest.fixture
def clock():
    with time_machine.travel(T0, tick=False) as traveller:
        yield traveller


def bounds(**changes: Any):
    return override_settings(BOUNDS=replace(settings.BOUNDS, **changes))


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def describe(data: bytes, name: str = "shot.png", media_type: str = "image/png") -> dict:
    return {"sha256": sha(data), "name": name, "media_type": media_type, "size": len(data)}


def upload(agent: AgentClient, data: bytes, media_type: str = "image/png", key: str = ""):
    response = agent.client.put(
        f"/v1/attachments/{key or sha(data)}",
        data=data,
        content_type=media_type,
        HTTP_AUTHORIZATION=f"Bearer {agent.token}",
    )
    return response.status_code, response.json()


def download(agent: AgentClient, attachment_id: int, suffix: str = ""):
    return agent.client.get(
        f"/v1/attachments/{attachment_id}{suffix}", HTTP_AUTHORIZATION=f"Bearer {agent.token}"
    )


def stored_files(folder: Path) -> list[str]:
    """The files under the attachments directory, its lock file aside."""
    return sorted(p.name for p in folder.iterdir() if p.name != ".lock") if folder.exists() else []


def nothing_stored(folder: Path) -> bool:
    return (
        not stored_files(folder)
        and not AttachmentContent.objects.exists()
        and not PendingUpload.objects.exists()
        and not Attachment.objects.exists()
    )


def send_with(agent: AgentClient, to: str, key: str, *files: dict, **options: Any):
    return agent.call(
        "send_message",
        to=to,
        content="see attached",
        client_request_id=key,
        attachments=list(files),
        **options,
    )


# ------------------------------------------------------------------ upload and send


def test_upload_then_send_stores_the_file_once_and_names_it_to_the_recipient(
    lead, backend, attachments_dir
):
    assert upload(lead, PNG) == (201, {"sha256": sha(PNG), "size": len(PNG)})
    assert upload(lead, PNG)[0] == 200  # already proven by this uploader
    status, sent = send_with(lead, "backend", "a-1", describe(PNG))
    assert status == 200, sent
    [described] = sent["attachments"]
    assert described == {
        "id": described["id"],
        "name": "shot.png",
        "media_type": "image/png",
        "size": len(PNG),
    }
    assert stored_files(attachments_dir) == [sha(PNG)]
    assert (attachments_dir / sha(PNG)).read_bytes() == PNG
    assert AttachmentContent.objects.count() == 1 and not PendingUpload.objects.exists()
    [inbox] = backend.ok("get_messages")["messages"]
    assert inbox["attachments"] == [described]
    answer = download(backend, described["id"])
    assert answer.status_code == 200 and answer.content == PNG
    assert answer["Content-Type"] == "image/png"
    assert answer["X-PocoLobby-Attachment-Sha256"] == sha(PNG)
    assert answer["X-PocoLobby-Attachment-Name"] == "shot.png"
    meta = download(backend, described["id"], "/meta").json()
    assert meta == {**described, "sha256": sha(PNG)}


def test_the_same_bytes_from_another_uploader_are_stored_once(
    make_agent, lead, backend, attachments_dir
):
    other = make_agent("other")
    upload(lead, PNG)
    assert upload(other, PNG)[0] == 201  # each uploader proves possession itself
    assert send_with(other, "backend", "o-1", describe(PNG, "same.png"))[0] == 200
    assert stored_files(attachments_dir) == [sha(PNG)]
    assert AttachmentContent.objects.count() == 1


def test_knowing_a_hash_grants_nothing(make_agent, lead, backend):
    upload(lead, PNG)
    status, body = send_with(backend, "lead", "k-1", describe(PNG))
    assert status == 409
    assert body["error"]["code"] == "attachment_upload_required"
    assert body["error"]["missing"] == [sha(PNG)]


def test_a_send_without_its_uploads_is_409_naming_the_missing_and_stores_nothing(lead, backend):
    upload(lead, PNG)
    status, body = send_with(
        lead, "backend", "m-1", describe(PNG), describe(NOTES, "notes.md", "text/markdown")
    )
    assert status == 409
    assert body["error"]["missing"] == [sha(NOTES)]
    assert not Message.objects.exists() and not Attachment.objects.exists()
    assert PendingUpload.objects.filter(sha256=sha(PNG)).exists()  # kept for the repeat
    assert upload(lead, NOTES, "text/markdown")[0] == 201
    status, sent = send_with(
        lead, "backend", "m-1", describe(PNG), describe(NOTES, "notes.md", "text/markdown")
    )
    assert status == 200
    assert [a["name"] for a in sent["attachments"]] == ["shot.png", "notes.md"]


def test_a_retry_of_a_stored_send_returns_the_original_and_needs_no_upload(
    lead, backend, attachments_dir
):
    upload(lead, PNG)
    first = send_with(lead, "backend", "r-1", describe(PNG))[1]
    # Even with the bytes gone from disk, the retry is answered before any check of them.
    (attachments_dir / sha(PNG)).unlink()
    status, again = send_with(lead, "backend", "r-1", describe(PNG))
    assert status == 200 and again["duplicate"] is True
    assert again["message_id"] == first["message_id"]
    assert again["attachments"] == first["attachments"]
    assert Message.objects.count() == 1


def test_a_send_refused_for_another_reason_stores_nothing_and_is_not_asked_for_uploads(
    lead, backend
):
    upload(lead, PNG)
    status, body = send_with(lead, "nobody", "x-1", describe(PNG))
    assert (status, body["error"]["code"]) == (404, "unknown_recipient")
    # Authorization comes before the attachment check: no upload is asked for.
    status, body = send_with(lead, "nobody", "x-2", describe(NOTES, "n.md", "text/markdown"))
    assert body["error"]["code"] == "unknown_recipient"
    with bounds(sends_per_minute=1):
        assert lead.send("backend", "fills the minute", "x-3")["status"] == "stored"
        status, body = send_with(lead, "backend", "x-4", describe(PNG))
    assert (status, body["error"]["code"]) == (429, "rate_limited")
    assert Message.objects.count() == 1 and not Attachment.objects.exists()
    assert PendingUpload.objects.filter(sha256=sha(PNG)).exists()


def test_a_description_that_does_not_match_the_uploaded_bytes_is_refused(lead, backend):
    upload(lead, PNG)
    wrong = {**describe(PNG), "size": len(PNG) - 1}
    status, body = send_with(lead, "backend", "d-1", wrong)
    assert (status, body["error"]["code"]) == (400, "attachment_description_mismatch")
    assert not Message.objects.exists()


@pytest.mark.parametrize(
    ("description", "fragment"),
    [
        ({"sha256": "A" * 64}, "sha256"),
        ({"name": "../etc/passwd"}, "file name"),
        ({"media_type": "application/x-msdownload"}, "not an attachment type"),
        ({"size": 11 * 1024 * 1024}, "POCOLOBBY_ATTACHMENT_IMAGE_BYTES"),
        ({"size": 0}, "size"),
    ],
)
def test_bad_descriptions_are_refused_naming_the_problem(lead, backend, description, fragment):
    status, body = send_with(lead, "backend", "b-1", {**describe(PNG), **description})
    assert status == 400 and fragment in body["error"]["message"]
    assert not Message.objects.exists()


def test_more_than_ten_attachments_are_refused(lead, backend):
    status, body = send_with(lead, "backend", "t-1", *[describe(PNG)] * 11)
    assert status == 400 and "attachments" in body["error"]["message"]


# ------------------------------------------------------------------ upload refusals


def test_a_hash_mismatch_is_refused_and_nothing_kept(lead, attachments_dir):
    status, body = upload(lead, PNG, key=sha(b"other bytes"))
    assert (status, body["error"]["code"]) == (400, "attachment_hash_mismatch")
    assert nothing_stored(attachments_dir)


@pytest.mark.parametrize(
    ("data", "media_type", "status", "code"),
    [
        (PNG, "image/jpeg", 400, "attachment_type_mismatch"),
        (b"\xff\xfe not utf-8 \xc3", "text/plain", 400, "attachment_type_mismatch"),
        (PNG, "application/octet-stream", 415, "unsupported_media_type"),
    ],
)
def test_bytes_that_are_not_their_type_are_refused(
    lead, attachments_dir, data, media_type, status, code
):
    answer = upload(lead, data, media_type)
    assert (answer[0], answer[1]["error"]["code"]) == (status, code)
    assert nothing_stored(attachments_dir)


def test_a_file_over_its_types_limit_is_refused_413(lead, attachments_dir):
    with bounds(attachment_document_bytes=len(NOTES) - 1):
        status, body = upload(lead, NOTES, "text/markdown")
    assert (status, body["error"]["code"]) == (413, "attachment_too_large")
    assert "POCOLOBBY_ATTACHMENT_DOCUMENT_BYTES" in body["error"]["message"]
    assert nothing_stored(attachments_dir)


def test_the_lobby_quota_of_distinct_content_refuses_507_with_nothing_stored(
    make_agent, lead, backend, attachments_dir
):
    with bounds(attachments_lobby_bytes=len(PNG) + 10):
        assert upload(lead, PNG)[0] == 201
        status, body = upload(lead, NOTES, "text/markdown")
        assert (status, body["error"]["code"]) == (507, "storage_capacity")
        assert body["error"]["setting"] == "POCOLOBBY_ATTACHMENTS_LOBBY_BYTES"
        assert "POCOLOBBY_ATTACHMENTS_LOBBY_BYTES" in body["error"]["message"]
        # Content the lobby already holds is counted once: another agent may prove it.
        assert upload(backend, PNG)[0] == 201
        # Another lobby has its own quota.
        operator.create_lobby("elsewhere")
        stranger = make_agent("stranger", lobby_name="elsewhere")
        assert upload(stranger, NOTES, "text/markdown")[0] == 201
    assert not PendingUpload.objects.filter(uploader=lead.agent, sha256=sha(NOTES)).exists()
    assert sorted(stored_files(attachments_dir)) == sorted([sha(PNG), sha(NOTES)])


def test_the_free_disk_reserve_refuses_507_with_nothing_stored(lead, attachments_dir):
    with bounds(attachments_reserve_bytes=10**18):
        status, body = upload(lead, PNG)
    assert (status, body["error"]["code"]) == (507, "storage_capacity")
    assert body["error"]["setting"] == "POCOLOBBY_ATTACHMENTS_RESERVE_BYTES"
    assert nothing_stored(attachments_dir)


# ------------------------------------------------------------------ access follows delivery


def test_only_the_uploader_and_recipients_may_read(make_agent, lead, backend):
    outsider = make_agent("outsider")
    operator.create_lobby("elsewhere")
    stranger = make_agent("lead", lobby_name="elsewhere")
    upload(lead, PNG)
    [file] = send_with(lead, "backend", "a-1", describe(PNG))[1]["attachments"]
    assert download(lead, file["id"]).status_code == 200
    assert download(backend, file["id"]).status_code == 200
    for someone in (outsider, stranger):
        answer = download(someone, file["id"])
        assert answer.status_code == 404 and answer.json()["error"]["code"] == "not_found"
        assert download(someone, file["id"], "/meta").status_code == 404
    assert download(backend, 99999).status_code == 404
    assert download(backend, "not-a-number").status_code == 404  # type: ignore[arg-type]


def test_content_removed_by_hand_is_a_clear_404_not_a_500(lead, backend, attachments_dir):
    upload(lead, PNG)
    [file] = send_with(lead, "backend", "h-1", describe(PNG))[1]["attachments"]
    (attachments_dir / sha(PNG)).unlink()
    answer = download(backend, file["id"])
    assert answer.status_code == 404 and "missing" in answer.json()["error"]["message"]


def test_a_scheduled_message_grants_nothing_before_its_delivery(clock, lead, backend):
    upload(lead, PNG)
    due = T0 + timedelta(minutes=10)
    status, sent = send_with(lead, "backend", "s-1", describe(PNG), deliver_at=due.isoformat())
    assert status == 200
    [file] = sent["attachments"]
    assert download(backend, file["id"]).status_code == 404
    clock.move_to(due)
    timers.tick()
    assert download(backend, file["id"]).status_code == 200


def test_a_room_member_removed_before_seeing_it_loses_access(make_agent, lead, backend):
    qa = make_agent("qa")
    lead.ok("create_room", room_id="app", members=["lead", "backend", "qa"])
    upload(lead, PNG)
    status, sent = lead.call(
        "send_room_message",
        room_id="app",
        content="look",
        client_request_id="room-1",
        attachments=[describe(PNG)],
    )
    assert status == 200
    [file] = sent["attachments"]
    assert download(qa, file["id"]).status_code == 200
    lead.ok("remove_room_members", room_id="app", members=["qa"])
    assert download(qa, file["id"]).status_code == 404
    assert download(backend, file["id"]).status_code == 200
    [shown] = backend.ok("get_messages")["messages"]
    assert shown["attachments"] == [file]


def test_a_broadcast_carries_its_files_to_everyone(make_agent, backend):
    chief = make_agent("chief", broadcast=True)
    qa = make_agent("qa")
    upload(chief, NOTES, "text/markdown")
    status, sent = chief.call(
        "broadcast",
        content="read this",
        client_request_id="b-1",
        attachments=[describe(NOTES, "plan.md", "text/markdown")],
    )
    assert status == 200
    [file] = sent["attachments"]
    for agent in (backend, qa):
        assert download(agent, file["id"]).content == NOTES


def test_recipients_keep_a_file_whose_uploader_was_removed(lead, backend):
    upload(lead, PNG)
    [file] = send_with(lead, "backend", "u-1", describe(PNG))[1]["attachments"]
    operator.remove_agent("my-team", "lead")
    assert download(backend, file["id"]).content == PNG


def test_pushes_name_each_attachment_without_its_content(lead, backend):
    upload(lead, PNG)
    [file] = send_with(lead, "backend", "p-1", describe(PNG))[1]["attachments"]
    claim = claim_runtime(backend.agent, "0b9c7a3e-7c2f-4d7e-9a55-3f8f1c0d2e11", None)
    frame = frames.push_frame(backend.agent.pk, claim.generation)
    assert frame is not None
    payload = json.loads(frame["content"].split("\n", 1)[1])
    assert payload["messages"][0]["attachments"] == [file]
    assert "content" not in payload["messages"][0]["attachments"][0]


# ------------------------------------------------------------------ retention


def test_content_is_kept_a_day_after_its_message_reached_recipients_then_collected(
    clock, lead, backend, attachments_dir
):
    upload(lead, PNG)
    [file] = send_with(lead, "backend", "k-1", describe(PNG))[1]["attachments"]
    sweep(T0 + timedelta(days=1) - timedelta(seconds=1))
    assert stored_files(attachments_dir) == [sha(PNG)]
    assert download(backend, file["id"]).status_code == 200
    clock.move_to(T0 + timedelta(days=1))
    sweep(T0 + timedelta(days=1))
    assert stored_files(attachments_dir) == [] and not AttachmentContent.objects.exists()
    # Expired: its uploader is told so; anyone else sees nothing.
    gone = download(lead, file["id"])
    assert (gone.status_code, gone.json()["error"]["code"]) == (410, "attachment_expired")
    assert download(backend, file["id"]).status_code == 404
    # The expired record goes 7 days after its expiry.
    sweep(T0 + timedelta(days=8) - timedelta(seconds=1))
    assert Attachment.objects.filter(pk=file["id"]).exists()
    sweep(T0 + timedelta(days=8))
    assert not Attachment.objects.exists()


def test_content_still_named_by_a_newer_message_stays(clock, lead, backend, attachments_dir):
    upload(lead, PNG)
    send_with(lead, "backend", "n-1", describe(PNG))
    clock.move_to(T0 + timedelta(hours=12))
    status, _ = send_with(lead, "backend", "n-2", describe(PNG))  # no new upload needed
    assert status == 200
    sweep(T0 + timedelta(days=1, hours=1))
    assert Message.objects.count() == 1 and stored_files(attachments_dir) == [sha(PNG)]
    sweep(T0 + timedelta(days=1, hours=12))
    assert stored_files(attachments_dir) == []


def test_a_waiting_scheduled_message_keeps_its_files_and_a_cancelled_one_holds_nothing(
    clock, lead, backend, attachments_dir
):
    upload(lead, PNG)
    upload(lead, NOTES, "text/markdown")
    due = T0 + timedelta(days=3)
    kept = send_with(lead, "backend", "w-1", describe(PNG), deliver_at=due.isoformat())[1]
    dropped = send_with(
        lead,
        "backend",
        "w-2",
        describe(NOTES, "n.md", "text/markdown"),
        deliver_at=due.isoformat(),
    )[1]
    lead.ok("cancel_scheduled", message_id=dropped["message_id"])
    sweep(T0 + timedelta(days=2))
    assert stored_files(attachments_dir) == [sha(PNG)]  # the cancelled one's file went
    clock.move_to(due)
    timers.tick()  # delivered: its day starts now, however late
    sweep(due + timedelta(hours=23))
    assert stored_files(attachments_dir) == [sha(PNG)]
    assert download(backend, kept["attachments"][0]["id"]).status_code == 200
    sweep(due + timedelta(days=1))
    assert stored_files(attachments_dir) == []


def test_an_active_schedule_keeps_its_files_and_each_occurrence_carries_them(
    clock, lead, backend, attachments_dir
):
    upload(lead, PNG)
    status, schedule = lead.call(
        "schedule_message",
        to="backend",
        content="daily shot",
        client_request_id="sch-1",
        time_zone="UTC",
        times=["09:00"],
        attachments=[describe(PNG, "daily.png")],
    )
    assert status == 200, schedule
    assert not PendingUpload.objects.exists()
    clock.move_to(T0 + timedelta(hours=1))
    timers.tick()
    [occurrence] = backend.ok("get_messages")["messages"]
    assert [a["name"] for a in occurrence["attachments"]] == ["daily.png"]
    assert download(backend, occurrence["attachments"][0]["id"]).content == PNG
    sweep(T0 + timedelta(days=5))  # the occurrence went; the schedule still holds the file
    assert stored_files(attachments_dir) == [sha(PNG)]
    lead.ok("cancel_scheduled", schedule_id=schedule["schedule_id"])
    sweep(T0 + timedelta(days=5, minutes=1))
    assert stored_files(attachments_dir) == []


def test_a_schedule_naming_files_not_uploaded_is_409_and_not_stored(lead, backend):
    arguments = {
        "to": "backend",
        "content": "daily shot",
        "client_request_id": "sch-9",
        "time_zone": "UTC",
        "times": ["09:00"],
        "attachments": [describe(PNG, "daily.png")],
    }
    status, body = lead.call("schedule_message", **arguments)
    assert (status, body["error"]["missing"]) == (409, [sha(PNG)])
    assert not Schedule.objects.exists() and not Attachment.objects.exists()
    upload(lead, PNG)
    assert lead.call("schedule_message", **arguments)[0] == 200
    status, again = lead.call("schedule_message", **arguments)
    assert status == 200 and again["duplicate"] is True
    assert Schedule.objects.count() == 1 and ScheduleAttachment.objects.count() == 1


def test_a_pending_upload_goes_after_the_grace_period(lead, attachments_dir):
    with bounds(upload_grace_seconds=600):
        with time_machine.travel(T0, tick=False):
            upload(lead, PNG)
        sweep(T0 + timedelta(seconds=599))
        assert stored_files(attachments_dir) == [sha(PNG)]
        sweep(T0 + timedelta(seconds=600))
    assert nothing_stored(attachments_dir)


def test_an_idle_sweep_only_reads(clock, lead, backend):
    upload(lead, PNG)
    send_with(lead, "backend", "i-1", describe(PNG))
    with CaptureQueriesContext(connection) as queries:
        sweep(T0 + timedelta(hours=1))
    assert all(q["sql"].lstrip().upper().startswith("SELECT") for q in queries.captured_queries)


def test_deleting_a_lobby_removes_only_content_nothing_else_names(
    make_agent, lead, backend, attachments_dir, django_capture_on_commit_callbacks
):
    operator.create_lobby("elsewhere")
    stranger = make_agent("stranger", lobby_name="elsewhere")
    upload(lead, PNG)
    upload(lead, NOTES, "text/markdown")
    send_with(lead, "backend", "l-1", describe(PNG))
    upload(stranger, NOTES, "text/markdown")  # shared by SHA-256 with the other lobby
    with django_capture_on_commit_callbacks(execute=True):
        operator.delete_lobby("my-team")
    assert stored_files(attachments_dir) == [sha(NOTES)]
    assert list(AttachmentContent.objects.values_list("sha256", flat=True)) == [sha(NOTES)]


# ------------------------------------------------------------------ the owner's listing


def test_the_owner_lists_metadata_and_usage_but_no_content(client, lead, backend):
    upload(lead, PNG)
    upload(lead, NOTES, "text/markdown")
    send_with(lead, "backend", "o-1", describe(PNG))
    answer = client.get(
        "/v1/admin/lobbies/my-team/attachments",
        HTTP_AUTHORIZATION=f"Bearer {settings_admin_token()}",
    )
    assert answer.status_code == 200
    listing = answer.json()
    assert listing["usage"]["content_bytes"] == len(PNG) + len(NOTES)
    assert listing["usage"]["pending_uploads"] == 1
    [entry] = listing["attachments"]
    assert entry["name"] == "shot.png" and entry["uploader"] == "lead"
    assert entry["messages"] == 1 and "content" not in entry
    assert MessageAttachment.objects.count() == 1


def settings_admin_token() -> str:
    from lobbies.access.secret_files import admin_token  # local: reads the test data directory

    return admin_token(settings.DATA_DIR)
