"""The operator's console routes under /v1/admin: accounts, owners, repositories, tickets.

Authenticated by the admin token like the lobby routes (lobbies/api/operator_api.py); composed
under /v1 by pocolobby/urls_api.py.
"""

from __future__ import annotations

from typing import Annotated, Any

from django.http import HttpRequest, JsonResponse

from console import local
from console.actions import accounts as account_actions
from console.models import Account
from lobbies.access.hosts import hosted, public_origin
from lobbies.api import operator_answers
from lobbies.api.catalog import parse_arguments
from lobbies.api.http import api_view, json_body
from lobbies.api.operator_api import admin, require_operator
from lobbies.api.schemas import Operation, bounded_text
from lobbies.errors import BrokerError, ErrorCode


class SaveAccount(Operation):
    email: Annotated[str, bounded_text(254)]
    enabled: bool | None = None
    may_create_lobbies: bool | None = None
    operator: bool | None = None


class SetOwner(Operation):
    email: Annotated[str, bounded_text(254)]


class Repository(Operation):
    repository: Annotated[str, bounded_text(140)]


def _account_entry(account: Account) -> dict[str, Any]:
    return {
        "email": account.email,
        "enabled": account.enabled,
        "may_create_lobbies": account.may_create_lobbies,
        "operator": account.operator,
    }


@api_view(
    ("POST",), admin("POST", operator_answers.AccountAnswer, SaveAccount, statuses=(200, 201))
)
def accounts(request: HttpRequest) -> JsonResponse:
    """Create an account or change it; disabling ends its sessions and hand-offs; `operator`
    lets its email-code sign-in open the Django admin (hosted)."""
    require_operator(request)
    args = parse_arguments(SaveAccount, json_body(request))
    account, created = account_actions.save_account(
        args.email,
        enabled=args.enabled,
        may_create_lobbies=args.may_create_lobbies,
        operator=args.operator,
    )
    return JsonResponse(
        {**_account_entry(account), "created": created}, status=201 if created else 200
    )


@api_view(("PUT",), admin("PUT", operator_answers.OwnerAnswer, SetOwner))
def lobby_owner(request: HttpRequest, lobby: str) -> JsonResponse:
    """Make an account the lobby's owner, creating the account if new."""
    require_operator(request)
    args = parse_arguments(SetOwner, json_body(request))
    account = account_actions.set_owner(lobby, args.email)
    return JsonResponse({"lobby": lobby, "owner": account.email})


@api_view(
    ("POST", "DELETE"),
    admin("POST", operator_answers.RepositoryApproved, Repository, statuses=(200, 201)),
    admin("DELETE", operator_answers.RepositoryWithdrawn, Repository),
)
def repositories(request: HttpRequest, lobby: str) -> JsonResponse:
    """Approve a repository for the lobby's notes (POST), or withdraw it (DELETE)."""
    require_operator(request)
    args = parse_arguments(Repository, json_body(request))
    if request.method == "POST":
        created = account_actions.approve_repository(lobby, args.repository)
        return JsonResponse(
            {"lobby": lobby, "approved": args.repository.strip()}, status=201 if created else 200
        )
    account_actions.withdraw_repository(lobby, args.repository)
    return JsonResponse({"lobby": lobby, "withdrawn": args.repository.strip()})


@api_view(("POST",), admin("POST", operator_answers.SettingsTicket, errors=(404,)))
def settings_ticket(request: HttpRequest) -> JsonResponse:
    """A one-minute, single-use ticket for `pocolobby settings` (local broker only), with the
    public https origin the same ticket also works at (a phone through the proxy), if any."""
    require_operator(request)
    if hosted():
        raise BrokerError(
            404,
            ErrorCode.NOT_LOCAL,
            "a hosted broker's owners sign in with email; tickets are local",
        )
    return JsonResponse(
        {
            "ticket": local.issue_ticket(),
            "expires_in": local.TICKET_SECONDS,
            "public_origin": public_origin() or None,
        }
    )
