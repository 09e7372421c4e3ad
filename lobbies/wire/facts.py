"""The one time format, and the delivery and addressing facts a message carries on the wire."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Protocol


def iso(moment: datetime | None) -> str | None:
    """ISO 8601 UTC with a Z, the one time format on the wire."""
    if moment is None:
        return None
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class DeliveryRow(Protocol):
    """A recipient's copy, as the store holds it (lobbies.models.Delivery)."""

    @property
    def state(self) -> str: ...
    @property
    def held_reason(self) -> str | None: ...
    @property
    def delivered_at(self) -> datetime | None: ...
    @property
    def adapter_received_at(self) -> datetime | None: ...
    @property
    def notification_attempted_at(self) -> datetime | None: ...
    @property
    def agent_seen_at(self) -> datetime | None: ...


def delivery_facts(delivery: DeliveryRow) -> dict[str, str | None]:
    return {
        "delivery_state": delivery.state,
        "held_reason": delivery.held_reason,
        "delivered_at": iso(delivery.delivered_at),
        "adapter_received_at": iso(delivery.adapter_received_at),
        "notification_attempted_at": iso(delivery.notification_attempted_at),
        "agent_seen_at": iso(delivery.agent_seen_at),
    }


class AddressedMessage(Protocol):
    """A message with its room name annotated (lobbies.models.Message)."""

    @property
    def room_name(self) -> str | None: ...
    @property
    def addressed_to(self) -> list[str]: ...
    @property
    def supersedes(self) -> int | None: ...
    @property
    def deliver_at(self) -> datetime | None: ...
    @property
    def late(self) -> bool: ...
    @property
    def schedule_id(self) -> int | None: ...
    @property
    def slot(self) -> datetime | None: ...


def addressing_facts(message: AddressedMessage) -> dict[str, Any]:
    """Room, addressees, replacement and timing: present only where they apply."""
    facts: dict[str, Any] = {}
    if message.room_name:
        facts["room_id"] = message.room_name
    if message.addressed_to:
        facts["addressed_to"] = message.addressed_to
    if message.supersedes:
        facts["supersedes"] = message.supersedes
    if message.deliver_at:
        facts["deliver_at"] = iso(message.deliver_at)
    if message.deliver_at or message.schedule_id:
        facts["late"] = message.late
    if message.schedule_id:
        facts["schedule_id"] = message.schedule_id
        facts["slot"] = iso(message.slot)
    return facts
