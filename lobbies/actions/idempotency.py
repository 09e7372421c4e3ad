"""Idempotent writes: an identical retry under the same client_request_id gets the original;
a changed one is refused. Messages and schedules both answer through here."""

from __future__ import annotations

import hashlib
import json

import orjson
from pydantic import BaseModel

from lobbies.errors import ErrorCode, conflict


def request_hash(args: BaseModel) -> str:
    """A digest of the whole validated request, to tell an identical retry from a changed one.

    The digest is of the standard encoder's text (sorted keys, no spaces, ASCII escapes),
    which every stored digest was made of. orjson writes the same bytes faster
    (docs/PERFORMANCE.md, "Figures from code comments")
    for what the hashed operations hold (text, integers, booleans, null: no numbers with a
    fraction, tests/lobbies/test_idempotency_digest.py) unless the text has a character
    past `~`, which the standard encoder escapes: those requests take the standard encoder.
    """
    dumped = args.model_dump(mode="json")
    if dumped.get("attachments", ()) is None:
        del dumped["attachments"]  # requests without attachments hash as they did before them
    canonical: bytes | None
    try:
        canonical = orjson.dumps(dumped, option=orjson.OPT_SORT_KEYS)
    except orjson.JSONEncodeError:  # an integer past 64 bits
        canonical = None
    if canonical is None or not canonical.isascii() or b"\x7f" in canonical:
        canonical = json.dumps(dumped, sort_keys=True, separators=(",", ":")).encode("utf-8")
    return hashlib.sha256(canonical).hexdigest()


def check_same_request(
    client_request_id: str, stored_hash: str, digest: str, *, kind: str, original_pk: int
) -> None:
    """Refuse a retry whose arguments differ from those of the original `kind` it names."""
    if stored_hash != digest:
        raise conflict(
            ErrorCode.IDEMPOTENCY_CONFLICT,
            f"client_request_id {client_request_id!r} was already used for a different "
            f"request ({kind} {original_pk}); use a new id for a new {kind}",
            **{f"{kind}_id": original_pk},
        )
