"""Each page route's JSON fields, and nothing else (console.web.StrictForm forbids extras)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from console.web import StrictForm

Email = Annotated[str, Field(min_length=3, max_length=254)]
Name = Annotated[str, Field(min_length=1, max_length=40)]
Next = Annotated[str, Field(max_length=300)]


class EmailForm(StrictForm):
    email: Email
    next: Next = ""


class CodeForm(StrictForm):
    email: Email
    code: Annotated[str, Field(min_length=1, max_length=12)]
    next: Next = ""


class EmptyForm(StrictForm):
    pass


class TicketForm(StrictForm):
    ticket: Annotated[str, Field(min_length=1, max_length=200)]


class CreateLobbyForm(StrictForm):
    name: Name


class CreateRoomForm(StrictForm):
    room: Name
    members: Annotated[list[Name], Field(max_length=200)] = []


class RoomMembersForm(StrictForm):
    room: Name
    members: Annotated[list[Name], Field(max_length=200)]


class RoomForm(StrictForm):
    room: Name


class VisibilityForm(StrictForm):
    visibility: Annotated[str, Field(max_length=16)]


class ViewerForm(StrictForm):
    email: Email


class AppearanceForm(StrictForm):
    agent: Name
    emoji: Annotated[str, Field(max_length=16)] = ""
    display_name: Annotated[str, Field(max_length=40)] = ""
    hidden: bool = False


class SummaryForm(StrictForm):
    model: Annotated[str, Field(max_length=40)]
    effort: Annotated[str, Field(max_length=8)]


class NotesSourceForm(StrictForm):
    room: Name
    repository: Annotated[str, Field(max_length=140)]
    ref: Annotated[str, Field(max_length=200)] = "main"
    paths: Annotated[list[Annotated[str, Field(max_length=300)]], Field(max_length=50)] = []


class DeleteLobbyForm(StrictForm):
    confirm: Annotated[str, Field(max_length=40)]


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


class PublicContentsForm(StrictForm):
    public_message_contents: bool


class AgentForm(StrictForm):
    """An owner control on one agent (retry notifications, cancel its scheduled messages)."""

    agent: Name


class RestForm(StrictForm):
    agent: Name
    rest: bool


class PermissionsForm(StrictForm):
    agent: Name
    broadcast: bool
    manage_rooms: bool


class DeliveryForm(StrictForm):
    paused: bool


class WatchingForm(StrictForm):
    allowed: bool


class CancelMessageForm(StrictForm):
    message_id: Annotated[int, Field(ge=1)]
