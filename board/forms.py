"""The dashboard's JSON fields (replies, broadcast, hand-over), and nothing else
(console.web.StrictForm forbids extras)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from console.forms import Name
from console.web import StrictForm


class ReplyForm(StrictForm):
    """The owner's reply box: the message's bounds are the send action's, not the form's."""

    to: Name
    content: str
    important: bool = False
    client_request_id: Annotated[str, Field(min_length=1, max_length=128)]
    # The agent's question this answers (the reply box on a question sends it).
    reply_to: Annotated[int, Field(ge=1, le=2**63 - 1)] | None = None


class HandOverForm(StrictForm):
    """The dashboard's Hand over button: which agent goes to which waiting conversation (the
    one the page showed, as `lobbies.push.presence.conversation_key` names it)."""

    agent: Name
    conversation: Annotated[str, Field(min_length=1, max_length=64)]


class BroadcastForm(StrictForm):
    """The owner's message to every agent: the send action's bounds, not the form's."""

    content: str
    important: bool = False
    client_request_id: Annotated[str, Field(min_length=1, max_length=128)]
