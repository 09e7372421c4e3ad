"""Each route of a lobby's settings pages: its JSON fields, and nothing else
(console.web.StrictForm forbids extras)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from console.forms import Email, Name
from console.web import StrictForm


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


class ViewerNotificationsForm(StrictForm):
    viewers_get_notifications: bool
