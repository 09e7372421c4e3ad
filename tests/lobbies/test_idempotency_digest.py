"""A request's digest (lobbies/actions/idempotency.py) is the standard encoder's, byte for byte:
digests stored before orjson wrote them must still recognise an identical retry."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import BaseModel

from lobbies.actions.idempotency import request_hash
from lobbies.api.schemas import Broadcast, ScheduleMessage, SendMessage, SendRoomMessage

HASHED = (SendMessage, SendRoomMessage, Broadcast, ScheduleMessage)


def standard_digest(args: BaseModel) -> str:
    """The digest as every earlier version made it."""
    dumped = args.model_dump(mode="json")
    if dumped.get("attachments", ()) is None:
        del dumped["attachments"]
    text = json.dumps(dumped, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


CONTENTS = [
    "plain words",
    'quotes " and \\ backslashes / slashes',
    "".join(chr(c) for c in range(1, 128)),  # every control character and DEL
    "Übersicht: größe 🚀",
    "tab\tnew\nline\r",
]


@pytest.mark.parametrize("content", CONTENTS)
def test_the_digest_is_the_standard_encoders(content: str):
    requests: list[BaseModel] = [
        SendMessage(to="backend", content=content, client_request_id="r-1"),
        SendMessage(
            to="backend",
            content=content,
            client_request_id="r-2",
            kind="request",
            priority="important",
            reply_to=2**62,
            correlation_id="c-1",
            fields={"files": ["a.py", "b/ü.py"], "options": ["x", "y"], "commit": "abc123"},
            deliver_at=datetime.now(UTC) + timedelta(hours=1),
        ),
        SendRoomMessage(
            room_id="design", content=content, client_request_id="r-3", addressed_to=["a", "b"]
        ),
        Broadcast(content=content, client_request_id="r-4", notify_when_seen=True),
        ScheduleMessage(
            client_request_id="r-5",
            to="backend",
            content=content,
            time_zone="Europe/Zürich",
            times=["09:30", "17:00"],
        ),
    ]
    for args in requests:
        assert request_hash(args) == standard_digest(args), args


def _types(schema: Any) -> set[str]:
    found: set[str] = set()
    if isinstance(schema, dict):
        kind = schema.get("type")
        if isinstance(kind, str):
            found.add(kind)
        elif isinstance(kind, list):
            found.update(kind)
        for value in schema.values():
            found |= _types(value)
    elif isinstance(schema, list):
        for value in schema:
            found |= _types(value)
    return found


@pytest.mark.parametrize("operation", HASHED, ids=lambda o: o.__name__)
def test_hashed_requests_hold_no_fractional_numbers(operation: type[BaseModel]):
    """orjson and the standard encoder write such numbers differently (1e+16, 1e16): a
    field of that type would need the digest to take the standard encoder for it."""
    assert "number" not in _types(operation.model_json_schema())
