"""A team from one manifest: `pocolobby team apply` makes a lobby's agents and rooms match it.

`plan_team` compares the manifest with the store and lists the changes, reading only; a dry
run answers that plan. `apply_team` plans and runs each step through the operator's own action
(`add_agent`, `set_permissions`, `set_role`, `create_room`, ..., each audited as when run
alone) in one transaction, so a step the store refuses leaves nothing changed, and issues an
enrolment code for each agent it added. Nothing the manifest leaves out is removed unless
`prune`: agents are removed (as `pocolobby agent remove`), rooms archived (as the owner's
Settings does; a room of that name in a later manifest is restored).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field

from django.db import transaction

from lobbies.access.permissions import Grant
from lobbies.actions import continuity, enrollment, operator
from lobbies.actions import rooms as room_actions
from lobbies.api.answers import at
from lobbies.api.operator_answers import (
    TeamApplied,
    TeamChange,
    TeamChangeKind,
    TeamEnrollment,
    TeamSubject,
)
from lobbies.api.schemas import TeamAgent, TeamManifest
from lobbies.errors import BrokerError, ErrorCode, bad_request
from lobbies.models import Agent, ArchivedRoom, Lobby, Room, RoomMember
from lobbies.names import OWNER_SENDER, check_agent_name, check_name

PERMISSIONS: tuple[Grant, ...] = ("broadcast", "manage_rooms")


@dataclass(frozen=True)
class Step:
    """One change of the plan: what the answer says, and the action that makes it."""

    subject: TeamSubject
    name: str
    change: TeamChangeKind
    detail: str
    run: Callable[[], object] = field(compare=False, repr=False)

    def entry(self) -> TeamChange:
        return {
            "subject": self.subject,
            "name": self.name,
            "change": self.change,
            "detail": self.detail,
        }


@dataclass(frozen=True)
class TeamPlan:
    lobby: str
    steps: list[Step]
    # In the lobby, not in the manifest, and kept (no prune).
    left_agents: list[str]
    left_rooms: list[str]


def _at_key(key: str, check: Callable[[], object]) -> None:
    """Run a name check; its refusal names the manifest's key."""
    try:
        check()
    except BrokerError as error:
        error.message = f"{key}: {error.message}"
        raise


def _permissions(spec: TeamAgent) -> list[Grant]:
    return [p for p in PERMISSIONS if p in spec.permissions]


def _listed(names: list[str] | list[Grant]) -> str:
    return ", ".join(names) or "none"


def _new_agent(lobby: str, name: str, spec: TeamAgent) -> Step:
    granted = _permissions(spec)
    parts = [f"permissions {_listed(granted)}"]
    if spec.description:
        parts.append(f"description {spec.description!r}")
    if spec.role:
        parts.append(f"role {len(spec.role)} characters")
    run = functools.partial(
        operator.add_agent,
        lobby,
        name,
        description=spec.description,
        role=spec.role,
        manage_rooms="manage_rooms" in granted,
        broadcast="broadcast" in granted,
    )
    return Step("agent", name, "add", "; ".join(parts), run)


def _agent_changes(lobby: str, agent: Agent, spec: TeamAgent) -> list[Step]:
    name, steps = agent.agent_id, []
    if agent.description != spec.description:
        detail = f"description {agent.description!r} -> {spec.description!r}"
        run = functools.partial(operator.set_description, lobby, name, spec.description)
        steps.append(Step("agent", name, "change", detail, run))
    if agent.role != spec.role:
        was, now = len(agent.role), len(spec.role)
        detail = f"role replaced ({was} -> {now} characters)"
        steps.append(
            Step(
                "agent",
                name,
                "change",
                detail,
                functools.partial(continuity.set_role, lobby, name, spec.role),
            )
        )
    granted = _permissions(spec)
    held = [p for p in PERMISSIONS if getattr(agent, p)]
    if granted != held:
        detail = f"permissions {_listed(held)} -> {_listed(granted)}"
        run = functools.partial(
            operator.set_permissions,
            lobby,
            name,
            broadcast="broadcast" in granted,
            manage_rooms="manage_rooms" in granted,
        )
        steps.append(Step("agent", name, "change", detail, run))
    return steps


def _changer(lobby: str) -> room_actions.Changer:
    """Looked up when a step runs: the lobby may be created by an earlier step."""
    return operator.operator_changer(lobby)


def _create_room(lobby: str, room: str, members: list[str]) -> None:
    room_actions.create_room(_changer(lobby), room, members)


def _restore_room(lobby: str, room: str, members: list[str]) -> None:
    changer = _changer(lobby)
    room_actions.restore_room(changer.lobby_id, room, actor_kind=changer.kind)
    room_actions.set_room_members(changer, room, members)


def _set_members(lobby: str, room: str, members: list[str]) -> None:
    room_actions.set_room_members(_changer(lobby), room, members)


def _archive_room(lobby: str, room: str) -> None:
    changer = _changer(lobby)
    room_actions.archive_room(changer.lobby_id, room, actor_kind=changer.kind)


def _check_names(manifest: TeamManifest, exists: bool) -> None:
    if not exists:
        _at_key("lobby", functools.partial(operator.check_new_lobby_name, manifest.lobby))
    for name in manifest.agents:
        _at_key(f"agents.{name}", functools.partial(check_agent_name, name))
    for room in manifest.rooms:
        _at_key(f"rooms.{room}", functools.partial(check_name, room, "room id"))


def _check_members(manifest: TeamManifest, in_lobby: set[str], prune: bool) -> None:
    """A member is an agent of the manifest, or (without prune) one the lobby already has."""
    known = set(manifest.agents) | (set() if prune else in_lobby)
    for room, spec in manifest.rooms.items():
        for member in spec.members:
            if member not in known:
                where = "the manifest" if prune else f"the manifest or of lobby {manifest.lobby!r}"
                why = " (--prune removes the lobby's other agents)" if member in in_lobby else ""
                raise bad_request(
                    f"rooms.{room}.members: {member!r} is not an agent of {where}{why}",
                    code=ErrorCode.UNKNOWN_AGENT,
                )


@dataclass(frozen=True)
class _Lobby:
    """What the plan compares with: the lobby's agents, rooms with members, archived rooms."""

    agents: dict[str, Agent]
    members: dict[str, set[str]]
    archived: set[str]


def _read_lobby(lobby: Lobby | None) -> _Lobby:
    if lobby is None:
        return _Lobby({}, {}, set())
    agents = Agent.objects.filter(lobby=lobby).exclude(agent_id=OWNER_SENDER)
    rooms = Room.objects.filter(lobby=lobby).values_list("room_id", flat=True)
    members: dict[str, set[str]] = {room: set() for room in rooms}
    pairs = RoomMember.objects.filter(room__lobby=lobby).values_list(
        "room__room_id", "agent__agent_id"
    )
    for room, agent_id in pairs:
        members[room].add(agent_id)
    archived = ArchivedRoom.objects.filter(lobby=lobby).values_list("room_id", flat=True)
    return _Lobby({a.agent_id: a for a in agents}, members, set(archived))


def _agent_steps(manifest: TeamManifest, now: _Lobby, prune: bool) -> list[Step]:
    lobby, steps = manifest.lobby, []
    for agent_id, spec in manifest.agents.items():
        agent = now.agents.get(agent_id)
        if agent is None:
            steps.append(_new_agent(lobby, agent_id, spec))
        else:
            steps += _agent_changes(lobby, agent, spec)
    if prune:
        detail = "its tokens and inbox are deleted; messages it sent stay"
        steps += [
            Step("agent", a, "remove", detail, functools.partial(operator.remove_agent, lobby, a))
            for a in sorted(set(now.agents) - set(manifest.agents))
        ]
    return steps


def _room_steps(manifest: TeamManifest, now: _Lobby, prune: bool) -> list[Step]:
    lobby, steps = manifest.lobby, []
    for room, spec in manifest.rooms.items():
        wanted = list(dict.fromkeys(spec.members))
        current = now.members.get(room)
        if current is None and room in now.archived:
            detail = f"from its archive, members {_listed(wanted)}"
            run = functools.partial(_restore_room, lobby, room, wanted)
            steps.append(Step("room", room, "restore", detail, run))
        elif current is None:
            run = functools.partial(_create_room, lobby, room, wanted)
            steps.append(Step("room", room, "create", f"members {_listed(wanted)}", run))
        elif current != set(wanted):
            added = [m for m in wanted if m not in current]
            removed = sorted(current - set(wanted))
            parts = [f"adds {_listed(added)}"] if added else []
            if removed:
                parts.append(f"removes {_listed(removed)} (their unseen copies are held)")
            run = functools.partial(_set_members, lobby, room, wanted)
            steps.append(Step("room", room, "change", "members: " + "; ".join(parts), run))
    if prune:
        detail = "archived: accepted messages still arrive, the name stays reserved"
        steps += [
            Step("room", r, "archive", detail, functools.partial(_archive_room, lobby, r))
            for r in sorted(set(now.members) - set(manifest.rooms))
        ]
    return steps


def plan_team(manifest: TeamManifest, *, prune: bool = False) -> TeamPlan:
    """The changes that make the lobby match the manifest, in the order they run; reads only.

    A bad name or an unknown room member is refused here, naming the manifest's key."""
    lobby = Lobby.objects.filter(name=manifest.lobby).first()
    _check_names(manifest, lobby is not None)
    now = _read_lobby(lobby)
    _check_members(manifest, set(now.agents), prune)
    steps = _agent_steps(manifest, now, prune) + _room_steps(manifest, now, prune)
    if lobby is None:
        create = functools.partial(operator.create_lobby, manifest.lobby)
        steps.insert(0, Step("lobby", manifest.lobby, "create", "", create))
    left_agents = [] if prune else sorted(set(now.agents) - set(manifest.agents))
    left_rooms = [] if prune else sorted(set(now.members) - set(manifest.rooms))
    return TeamPlan(manifest.lobby, steps, left_agents, left_rooms)


def apply_team(
    manifest: TeamManifest,
    *,
    prune: bool = False,
    dry_run: bool = False,
    expires_minutes: int = enrollment.DEFAULT_MINUTES,
) -> TeamApplied:
    """Plan, and unless `dry_run` run the plan in one transaction; each added agent gets an
    enrolment code (its first token, never shown, is revoked when the code is redeemed)."""
    enrollments: list[TeamEnrollment] = []
    if dry_run:
        plan = plan_team(manifest, prune=prune)
    else:
        with transaction.atomic():
            plan = plan_team(manifest, prune=prune)
            for step in plan.steps:
                step.run()
                if step.subject == "agent" and step.change == "add":
                    issued = enrollment.enroll_agent(plan.lobby, step.name, expires_minutes)
                    enrollments.append(
                        {
                            "agent": step.name,
                            "code": issued.code,
                            "expires_at": at(issued.expires_at),
                        }
                    )
    return {
        "lobby": plan.lobby,
        "dry_run": dry_run,
        "changes": [step.entry() for step in plan.steps],
        "enrollments": enrollments,
        "not_in_manifest": {"agents": plan.left_agents, "rooms": plan.left_rooms},
    }
