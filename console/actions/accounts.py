"""Accounts, owners and approved repositories: the operator's side (admin API, Django admin),
and an allowed account creating its own lobby."""

from __future__ import annotations

import re

from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import transaction
from django.utils import timezone

from console.actions.sign_in import normalise_email
from console.models import Account, ApprovedRepository, Handoff, LobbyOwner, WebSession
from lobbies.actions import operator
from lobbies.actions.audit import record_audit
from lobbies.errors import ErrorCode, bad_request, forbidden, not_found
from lobbies.models import ActorKind, AuditAction, Lobby

LOBBIES_PER_ACCOUNT = 3
REPOSITORY = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})/[A-Za-z0-9._-]{1,100}$")


def checked_email(value: str) -> str:
    email = normalise_email(value)
    try:
        validate_email(email)
    except ValidationError:
        raise bad_request(
            f"{value!r} is not an email address", code=ErrorCode.INVALID_EMAIL
        ) from None
    return email


def checked_repository(value: str) -> str:
    repository = value.strip()
    if not REPOSITORY.match(repository) or repository.endswith((".", "/..")):
        raise bad_request(
            f"{value!r} is not a GitHub repository: write owner/name",
            code=ErrorCode.INVALID_REPOSITORY,
        )
    return repository


def save_account(
    email: str,
    *,
    enabled: bool | None = None,
    may_create_lobbies: bool | None = None,
    operator: bool | None = None,
) -> tuple[Account, bool]:
    """Create or change an account; disabling deletes its sessions and hand-offs. `operator`
    marks (or unmarks) the account as one whose sign-in opens the Django admin when hosted."""
    email = checked_email(email)
    with transaction.atomic():
        account = Account.objects.select_for_update().filter(email=email).first()
        created = account is None
        if account is None:
            account = Account.objects.create(
                email=email,
                enabled=True if enabled is None else enabled,
                may_create_lobbies=bool(may_create_lobbies),
                operator=bool(operator),
                created_at=timezone.now(),
            )
            record_audit(ActorKind.OPERATOR, AuditAction.ACCOUNT_CREATED, target=email)
            if account.operator:
                _audit_operator(account)
        else:
            if may_create_lobbies is not None:
                account.may_create_lobbies = may_create_lobbies
            if operator is not None and operator != account.operator:
                account.operator = operator
                _audit_operator(account)
            if enabled is not None and enabled != account.enabled:
                account.enabled = enabled
                record_audit(
                    ActorKind.OPERATOR,
                    AuditAction.ACCOUNT_ENABLED if enabled else AuditAction.ACCOUNT_DISABLED,
                    target=email,
                )
            account.save(update_fields=["enabled", "may_create_lobbies", "operator"])
        if not account.enabled:
            WebSession.objects.filter(account=account).delete()
            Handoff.objects.filter(account=account).delete()
    return account, created


def _audit_operator(account: Account) -> None:
    """Who may open the Django admin by email code is the broker's most powerful grant: each
    change of it is audited (detail `operator`: the new value)."""
    record_audit(
        ActorKind.OPERATOR,
        AuditAction.ACCOUNT_OPERATOR_SET,
        target=account.email,
        detail={"operator": account.operator},
    )


def set_owner(lobby_name: str, email: str) -> Account:
    """Make the account (created if new) the lobby's one owner."""
    email = checked_email(email)
    with transaction.atomic():
        lobby = operator.lobby_named(lobby_name)
        account, created = Account.objects.get_or_create(
            email=email, defaults={"created_at": timezone.now()}
        )
        if created:
            record_audit(ActorKind.OPERATOR, AuditAction.ACCOUNT_CREATED, target=email)
        LobbyOwner.objects.update_or_create(
            lobby=lobby, defaults={"account": account, "created_at": timezone.now()}
        )
        record_audit(ActorKind.OPERATOR, AuditAction.OWNER_SET, lobby_name=lobby.name, target=email)
    return account


def approve_repository(lobby_name: str, repository: str) -> bool:
    repository = checked_repository(repository)
    with transaction.atomic():
        lobby = operator.lobby_named(lobby_name)
        _, created = ApprovedRepository.objects.get_or_create(
            lobby=lobby, repository=repository, defaults={"created_at": timezone.now()}
        )
        if created:
            record_audit(
                ActorKind.OPERATOR,
                AuditAction.REPOSITORY_APPROVED,
                lobby_name=lobby.name,
                target=repository,
            )
    return created


def withdraw_repository(lobby_name: str, repository: str) -> None:
    repository = repository.strip()
    with transaction.atomic():
        lobby = operator.lobby_named(lobby_name)
        deleted, _ = ApprovedRepository.objects.filter(lobby=lobby, repository=repository).delete()
        if not deleted:
            raise not_found(
                ErrorCode.UNKNOWN_REPOSITORY, f"{repository!r} is not approved for {lobby.name!r}"
            )
        record_audit(
            ActorKind.OPERATOR,
            AuditAction.REPOSITORY_WITHDRAWN,
            lobby_name=lobby.name,
            target=repository,
        )


def create_owned_lobby(account: Account, name: str) -> Lobby:
    """An allowed account creates a lobby and becomes its owner, in one transaction."""
    with transaction.atomic():
        current = Account.objects.select_for_update().filter(pk=account.pk, enabled=True).first()
        if current is None or not current.may_create_lobbies:
            raise forbidden(
                ErrorCode.NOT_ALLOWED, "the operator has not allowed you to create lobbies"
            )
        if LobbyOwner.objects.filter(account=current).count() >= LOBBIES_PER_ACCOUNT:
            raise forbidden(
                ErrorCode.LOBBY_LIMIT,
                f"you already own {LOBBIES_PER_ACCOUNT} lobbies, the most allowed",
            )
        lobby = operator.create_lobby(name, actor_kind=ActorKind.ACCOUNT, account=current.email)
        LobbyOwner.objects.create(lobby=lobby, account=current, created_at=timezone.now())
    return lobby
