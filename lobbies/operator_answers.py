"""What the operator's /v1/admin routes answer, as pydantic models (lobbies/answers.py says what
these models are for and how the contract test holds them to the wire).
"""

from __future__ import annotations

from typing import Literal

from lobbies.answers import AgentEntry, Answer, AttachmentDescriptor, Time


class LobbyEntry(Answer):
    name: str
    created_at: Time


class LobbyList(Answer):
    lobbies: list[LobbyEntry]


class Deleted(Answer):
    deleted: str


class WaitingConversation(Answer):
    """A new conversation refused with runtime_conflict that waits for the owner's hand over."""

    runtime_id: str
    since: Time
    last_asked_at: Time


class OperatorAgentEntry(AgentEntry):
    """The owner's listing: disabled agents too, with inbox counts and the runtime binding."""

    enabled: bool
    pending: int
    important: int
    held: int
    runtime_id: str | None
    runtime_generation: int
    runtime_bound_at: Time | None
    # The bound conversation ended cleanly; the next new conversation takes the agent.
    runtime_released_at: Time | None
    waiting: WaitingConversation | None
    loaded_checkpoint_revision: int | None
    active_credentials: int


class OperatorAgentList(Answer):
    agents: list[OperatorAgentEntry]


class Credential(Answer):
    """A new agent token: shown once."""

    lobby: str
    agent: str
    token: str


class Removed(Answer):
    removed: str


class RoleAnswer(Answer):
    agent: str
    role_characters: int


class DeliveryAnswer(Answer):
    lobby: str
    delivery_paused: bool


class Disabled(Answer):
    disabled: str
    held: int


class Enabled(Answer):
    enabled: str


class CancelledForAgent(Answer):
    agent: str
    messages: int
    schedules: int


class RuntimeReset(Answer):
    reset: str
    retired_runtime_id: str | None


class HandedOver(Answer):
    agent: str
    runtime_id: str
    retired_runtime_id: str | None


class Resting(Answer):
    agent: str
    resting: bool


class Retried(Answer):
    retried: str


class PermissionsAnswer(Answer):
    agent: str
    broadcast: bool
    manage_rooms: bool


class BrokerState(Answer):
    incarnation: str
    restore_mode: bool
    restored_from: str | None
    backup_taken_at: Time | None
    restored_at: Time | None
    restore_finished_at: Time | None


class StatusLobby(LobbyEntry):
    agents: list[OperatorAgentEntry]


class BrokerStatus(Answer):
    lobbies: list[StatusLobby]
    broker: BrokerState


class RestoreFinished(Answer):
    finished: Literal[True]
    incarnation: str
    uncertain: int


class AccountAnswer(Answer):
    email: str
    enabled: bool
    may_create_lobbies: bool
    operator: bool
    created: bool


class OwnerAnswer(Answer):
    lobby: str
    owner: str


class RepositoryApproved(Answer):
    lobby: str
    approved: str


class RepositoryWithdrawn(Answer):
    lobby: str
    withdrawn: str


class SettingsTicket(Answer):
    ticket: str
    expires_in: int


class LobbyAttachmentUsage(Answer):
    content_bytes: int
    quota_bytes: int
    attachments: int
    expired: int
    pending_uploads: int


class LobbyAttachment(AttachmentDescriptor):
    sha256: str
    uploader: str | None
    created_at: Time
    expired_at: Time | None
    messages: int
    schedules: int


class LobbyAttachments(Answer):
    """The owner's listing of a lobby's attachments: metadata and usage, never content."""

    lobby: str
    usage: LobbyAttachmentUsage
    attachments: list[LobbyAttachment]
