"""What the operator's /v1/admin routes answer, as TypedDicts (lobbies/api/answers.py says how
these shapes make the document and how the contract test holds them to the wire).
"""

from __future__ import annotations

from typing import Literal

from pydantic import with_config
from typing_extensions import TypedDict  # as lobbies/api/answers.py says

from lobbies.api.answers import ANSWER_CONFIG, AgentEntry, AttachmentDescriptor, Time


@with_config(ANSWER_CONFIG)
class LobbyEntry(TypedDict):
    name: str
    created_at: Time


@with_config(ANSWER_CONFIG)
class LobbyList(TypedDict):
    lobbies: list[LobbyEntry]


@with_config(ANSWER_CONFIG)
class Deleted(TypedDict):
    deleted: str


@with_config(ANSWER_CONFIG)
class WaitingConversation(TypedDict):
    """A new conversation refused with runtime_conflict that waits for the owner's hand over."""

    runtime_id: str
    since: Time
    last_asked_at: Time


@with_config(ANSWER_CONFIG)
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


@with_config(ANSWER_CONFIG)
class OperatorAgentList(TypedDict):
    agents: list[OperatorAgentEntry]


@with_config(ANSWER_CONFIG)
class Credential(TypedDict):
    """A new agent token: shown once."""

    lobby: str
    agent: str
    token: str


@with_config(ANSWER_CONFIG)
class EnrollmentCode(TypedDict):
    """A one-time code `pocolobby join` redeems for the agent's token: shown once."""

    lobby: str
    agent: str
    code: str
    expires_at: Time


@with_config(ANSWER_CONFIG)
class Removed(TypedDict):
    removed: str


@with_config(ANSWER_CONFIG)
class RoleAnswer(TypedDict):
    agent: str
    role_characters: int


@with_config(ANSWER_CONFIG)
class DeliveryAnswer(TypedDict):
    lobby: str
    delivery_paused: bool


@with_config(ANSWER_CONFIG)
class Disabled(TypedDict):
    disabled: str
    held: int


@with_config(ANSWER_CONFIG)
class Enabled(TypedDict):
    enabled: str


@with_config(ANSWER_CONFIG)
class CancelledForAgent(TypedDict):
    agent: str
    messages: int
    schedules: int


@with_config(ANSWER_CONFIG)
class RuntimeReset(TypedDict):
    reset: str
    retired_runtime_id: str | None


@with_config(ANSWER_CONFIG)
class HandedOver(TypedDict):
    agent: str
    runtime_id: str
    retired_runtime_id: str | None


@with_config(ANSWER_CONFIG)
class Resting(TypedDict):
    agent: str
    resting: bool


@with_config(ANSWER_CONFIG)
class Retried(TypedDict):
    retried: str


@with_config(ANSWER_CONFIG)
class PermissionsAnswer(TypedDict):
    agent: str
    broadcast: bool
    manage_rooms: bool


@with_config(ANSWER_CONFIG)
class BrokerState(TypedDict):
    incarnation: str
    restore_mode: bool
    restored_from: str | None
    backup_taken_at: Time | None
    restored_at: Time | None
    restore_finished_at: Time | None


@with_config(ANSWER_CONFIG)
class OwnerQuestionEntry(TypedDict):
    """An agent's question to the owner that the owner has not answered yet
    (lobbies/question_selectors.py); `opening` is its first words, for a terminal."""

    message_id: int
    agent_id: str
    kind: str | None
    asked_at: Time
    opening: str


@with_config(ANSWER_CONFIG)
class StatusLobby(LobbyEntry):
    agents: list[OperatorAgentEntry]
    owner_questions: list[OwnerQuestionEntry]


@with_config(ANSWER_CONFIG)
class Lobbies(TypedDict):
    """What the status selector reads; the route adds the broker's state."""

    lobbies: list[StatusLobby]


@with_config(ANSWER_CONFIG)
class BrokerStatus(Lobbies):
    broker: BrokerState


@with_config(ANSWER_CONFIG)
class RestoreFinished(TypedDict):
    finished: Literal[True]
    incarnation: str
    uncertain: int


@with_config(ANSWER_CONFIG)
class AccountAnswer(TypedDict):
    email: str
    enabled: bool
    may_create_lobbies: bool
    operator: bool
    created: bool


@with_config(ANSWER_CONFIG)
class OwnerAnswer(TypedDict):
    lobby: str
    owner: str


@with_config(ANSWER_CONFIG)
class RepositoryApproved(TypedDict):
    lobby: str
    approved: str


@with_config(ANSWER_CONFIG)
class RepositoryWithdrawn(TypedDict):
    lobby: str
    withdrawn: str


@with_config(ANSWER_CONFIG)
class SettingsTicket(TypedDict):
    ticket: str
    expires_in: int
    public_origin: str | None


@with_config(ANSWER_CONFIG)
class LobbyAttachmentUsage(TypedDict):
    content_bytes: int
    quota_bytes: int
    attachments: int
    expired: int
    pending_uploads: int


@with_config(ANSWER_CONFIG)
class LobbyAttachment(AttachmentDescriptor):
    sha256: str
    uploader: str | None
    created_at: Time
    expired_at: Time | None
    messages: int
    schedules: int


@with_config(ANSWER_CONFIG)
class LobbyAttachments(TypedDict):
    """The owner's listing of a lobby's attachments: metadata and usage, never content."""

    lobby: str
    usage: LobbyAttachmentUsage
    attachments: list[LobbyAttachment]


TeamSubject = Literal["lobby", "agent", "room"]
TeamChangeKind = Literal["create", "add", "change", "remove", "restore", "archive"]


@with_config(ANSWER_CONFIG)
class TeamChange(TypedDict):
    """One change `team apply` makes (or, in a dry run, would make)."""

    subject: TeamSubject
    name: str
    change: TeamChangeKind
    detail: str


@with_config(ANSWER_CONFIG)
class TeamEnrollment(TypedDict):
    """A one-time code for an agent the apply added: shown once."""

    agent: str
    code: str
    expires_at: Time


@with_config(ANSWER_CONFIG)
class TeamLeft(TypedDict):
    """What the lobby holds that the manifest does not name, left as it is (no prune)."""

    agents: list[str]
    rooms: list[str]


@with_config(ANSWER_CONFIG)
class TeamApplied(TypedDict):
    lobby: str
    dry_run: bool
    changes: list[TeamChange]
    enrollments: list[TeamEnrollment]
    not_in_manifest: TeamLeft


@with_config(ANSWER_CONFIG)
class OwnerMessageSent(TypedDict):
    """The owner's message the operator sent (`pocolobby lobby reply` / `tell`): `reply_to`
    is the question it answers, and `answered_before` the owner's earlier answer to it, if
    any; `duplicate` is true when a retry returned the stored message."""

    lobby: str
    to: str
    message_id: int
    reply_to: int | None
    answered_before: int | None
    duplicate: bool
