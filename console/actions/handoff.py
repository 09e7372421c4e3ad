"""Hand-offs: a one-minute, single-use pass from the account area to one lobby's host, bound
to the browser that asked for it through the hash of a verifier only that browser holds."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from console.access import account_role
from console.models import Account, Handoff, SessionPlace, WebSession
from console.web import PageRefusal, digest, new_secret
from lobbies.errors import ErrorCode
from lobbies.models import Lobby

HANDOFF_LIFETIME = timedelta(minutes=1)
LOBBY_SESSION_LIFETIME = timedelta(days=30)


def handoff_key(token: str, verifier_hash: str) -> str:
    return digest(token + verifier_hash)


def _check_access(account: Account, lobby: Lobby, to_settings: bool) -> None:
    role = account_role(account, lobby)
    if role is None:
        raise PageRefusal(
            403,
            f"{account.email} is neither the owner nor a listed viewer of {lobby.name}",
            ErrorCode.FORBIDDEN,
        )
    if to_settings and role != "owner":
        raise PageRefusal(
            403, f"only the owner of {lobby.name} can open its settings", ErrorCode.FORBIDDEN
        )


def open_handoff(account: Account, lobby_name: str, verifier_hash: str, to_settings: bool) -> str:
    """Store a hand-off for this account and lobby; the token goes only into the redirect."""
    with transaction.atomic():
        lobby = Lobby.objects.filter(name=lobby_name).first()
        if lobby is None:
            raise PageRefusal(
                404, f"there is no lobby named {lobby_name!r}", ErrorCode.UNKNOWN_LOBBY
            )
        if not Account.objects.filter(pk=account.pk, enabled=True).exists():
            raise PageRefusal(403, "this account is disabled", ErrorCode.FORBIDDEN)
        _check_access(account, lobby, to_settings)
        now = timezone.now()
        token, _ = new_secret()
        Handoff.objects.create(
            key_hash=handoff_key(token, verifier_hash),
            account=account,
            lobby=lobby,
            to_settings=to_settings,
            created_at=now,
            expires_at=now + HANDOFF_LIFETIME,
        )
    return token


@dataclass(frozen=True)
class LobbySession:
    token: str
    to_settings: bool


def consume_handoff(lobby_name: str, token: str, verifier: str, previous: str) -> LobbySession:
    """Consume the hand-off this browser's verifier names and start its session on this host,
    ending the session the browser held here before."""
    if not verifier:
        raise PageRefusal(
            400,
            "this sign-in link belongs to the browser that asked for it; open the lobby in "
            "this browser and sign in from there",
            ErrorCode.OTHER_BROWSER,
        )
    key = handoff_key(token, digest(verifier))
    now = timezone.now()
    with transaction.atomic():
        handoff = (
            Handoff.objects.select_for_update()
            .select_related("account", "lobby")
            .filter(key_hash=key, lobby__name=lobby_name)
            .first()
        )
        if handoff is None:
            raise PageRefusal(
                400,
                "this sign-in link was already used or belongs to another browser; nothing "
                "changed — sign in again from this lobby's page",
                ErrorCode.UNKNOWN_HANDOFF,
            )
        handoff.delete()
        if handoff.expires_at <= now:
            expired = True
        else:
            expired = False
            account, lobby = handoff.account, handoff.lobby
            if not account.enabled:
                raise PageRefusal(403, "this account is disabled", ErrorCode.FORBIDDEN)
            _check_access(account, lobby, handoff.to_settings)
            if previous:
                WebSession.objects.filter(
                    token_hash=digest(previous), place=SessionPlace.LOBBY, lobby=lobby
                ).delete()
            session_token = WebSession.open(account, lobby, now, LOBBY_SESSION_LIFETIME)
    if expired:
        raise PageRefusal(
            400,
            "this sign-in link has expired (they last a minute); sign in again",
            ErrorCode.EXPIRED,
        )
    return LobbySession(session_token, handoff.to_settings)
