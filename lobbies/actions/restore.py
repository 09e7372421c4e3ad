"""Restore mode as the rest of the broker sees it (seed section 9): closed or open, and the work
each agent must be told may already have been done.

While the store is in restore mode agents are refused (503 `restore_mode`, `check_open`) and the
dispatcher's timers do not run (`access_closed`). After it, each agent's next bootstrap and
get_context list its uncertain work until the session confirms it is ready (`settle_uncertain`).
Entering and finishing restore mode are the operator's commands, in
lobbies/actions/restore_commands.py, which builds on this module.
"""

from __future__ import annotations

import uuid

from lobbies.api.answers import Restored
from lobbies.api.operator_answers import BrokerState as StateEntry
from lobbies.errors import BrokerError, ErrorCode
from lobbies.models import Agent, BrokerState, DeliveryState, UncertainWork
from lobbies.wire.facts import iso

# This process's last reading: True once the store was seen open. A store only enters restore
# mode while no broker serves it (the restore command refuses otherwise), so an open reading
# stays true for the life of the process and the hot path reads nothing.
_SEEN_OPEN: dict[str, bool] = {"open": False}


def broker_state() -> BrokerState:
    """The store's state row, created with a first incarnation on first use."""
    state = BrokerState.objects.filter(pk=1).first()
    if state is None:
        state, _ = BrokerState.objects.get_or_create(pk=1, defaults={"incarnation": uuid.uuid4()})
    return state


def access_closed() -> bool:
    """True while the store is in restore mode (read from the store until seen open)."""
    if _SEEN_OPEN["open"]:
        return False
    closed = BrokerState.objects.filter(pk=1, restore_mode=True).exists()
    _SEEN_OPEN["open"] = not closed
    return closed


def forget_reading() -> None:
    """Read the store again next time (after this process entered or left restore mode)."""
    _SEEN_OPEN["open"] = False


def check_open() -> None:
    if access_closed():
        raise BrokerError(
            503,
            ErrorCode.RESTORE_MODE,
            "this broker was restored from a backup and is closed to agents until its operator "
            "runs `pocolobby restore --finish`; use the configuration the operator sends you",
        )


def state_entry() -> StateEntry:
    """What health and status show about this store's history."""
    state = broker_state()
    return {
        "incarnation": str(state.incarnation),
        "restore_mode": state.restore_mode,
        "restored_from": state.restored_from or None,
        "backup_taken_at": iso(state.backup_taken_at),
        "restored_at": iso(state.restored_at),
        "restore_finished_at": iso(state.finished_at),
    }


def uncertain_message_ids(agent_pk: int) -> list[int]:
    """Copies this agent may already have acted on before the restore, still pending."""
    return list(
        UncertainWork.objects.filter(
            agent_id=agent_pk,
            message__deliveries__recipient_id=agent_pk,
            message__deliveries__state=DeliveryState.PENDING,
        )
        .order_by("message__sequence")
        .values_list("message_id", flat=True)
    )


def restore_entry(agent: Agent) -> Restored | None:
    """get_context's account of a restore this session has not yet confirmed (ready)."""
    if not UncertainWork.objects.filter(agent=agent).exists():
        return None
    state = broker_state()
    return {
        "incarnation": str(state.incarnation),
        "backup_taken_at": iso(state.backup_taken_at),
        "restored_at": iso(state.restored_at),
        "uncertain_message_ids": uncertain_message_ids(agent.pk),
        "note": (
            "this broker was restored from a backup: these messages were pending then, and you "
            "(or an earlier session) may already have acted on them, and your checkpoint and "
            "acknowledgments may predate the backup. Check your work before repeating any of it."
        ),
    }


def settle_uncertain(agent_pk: int) -> None:
    """The session confirmed its bootstrap (ready): it has been told; stop listing the work."""
    UncertainWork.objects.filter(agent_id=agent_pk).delete()
