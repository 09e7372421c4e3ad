"""Idempotent writes: an identical retry under the same client_request_id gets the original;
a changed one is refused. Messages and schedules both answer through here."""

from __future__ import annotations

import hashlib
import json

from pydantic import BaseModel

from lobbies.errors import conflict


def request_hash(args: BaseModel) -> str:
    """A digest of the whole validated request, to tell an identical retry from a changed one."""
    dumped = args.model_dump(mode="json")
    if dumped.get("attachments", ()) is None:
        del dumped["attachments"]  # requests without attachments hash as they did before them
    canonical = json.dumps(dumped, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def check_same_request(
    client_request_id: str, stored_hash: str, digest: str, *, kind: str, original_pk: int
) -> None:
    """Refuse a retry whose arguments differ from those of the original `kind` it names."""
    if stored_hash != digest:
        raise conflict(
            "idempotency_conflict",
            f"client_request_id {client_request_id!r} was already used for a different "
            f"request ({kind} {original_pk}); use a new id for a new {kind}",
            **{f"{kind}_id": original_pk},
        )
