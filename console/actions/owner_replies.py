"""The owner (or the local operator) answering an agent from the dashboard's reply boxes."""

from __future__ import annotations

from django.db import transaction

from console.actions.lobby_settings import Actor, owned
from lobbies.actions.messages import SendOutcome
from lobbies.actions.owner_messages import send_owner_broadcast, send_owner_message


def reply_to_agent(
    actor: Actor,
    lobby_id: int,
    *,
    to: str,
    content: str,
    important: bool,
    client_request_id: str,
    reply_to: int | None = None,
) -> SendOutcome:
    """Re-check ownership and send, in one transaction: a removed owner's reply stores nothing."""
    with transaction.atomic():
        lobby = owned(actor, lobby_id)
        return send_owner_message(
            lobby,
            to=to,
            content=content,
            important=important,
            client_request_id=client_request_id,
            actor_kind=actor.kind,
            account=actor.email,
            reply_to=reply_to,
        )


def broadcast_to_lobby(
    actor: Actor, lobby_id: int, *, content: str, important: bool, client_request_id: str
) -> SendOutcome:
    """The owner's message to every agent, after the same ownership re-check."""
    with transaction.atomic():
        lobby = owned(actor, lobby_id)
        return send_owner_broadcast(
            lobby,
            content=content,
            important=important,
            client_request_id=client_request_id,
            actor_kind=actor.kind,
            account=actor.email,
        )
