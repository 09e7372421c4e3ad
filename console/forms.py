"""Each console page route's JSON fields, and nothing else (console.web.StrictForm forbids
extras). A lobby's settings pages have theirs in board.settings.forms, the dashboard's in
board.forms."""

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
