"""A person's own notification settings: this device's push subscription, quiet hours and
the still-waiting mail. Each is one write in one transaction; nothing here sends."""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from datetime import time
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django.core import signing
from django.db import IntegrityError, transaction
from django.utils import timezone

from board.models import AlertPreferences, BoardConfig, PushSubscription
from board.notifications.webpush_endpoints import EndpointRefused, check_endpoint
from console.access import Visitor
from console.actions.lobby_settings import Actor, audit, owned
from console.models import Account
from lobbies.errors import BrokerError, ErrorCode, bad_request, conflict, forbidden, not_found
from lobbies.models import AuditAction, Lobby

UNSUBSCRIBE_SALT = "pocolobby.alert-mail.unsubscribe"
# Devices one person may have this lobby's pushes on; a new one beyond replaces the oldest.
MAX_DEVICES = 10


def may_get_pushes(visitor: Visitor, lobby: Lobby) -> bool:
    """The owner (the operator on a local broker) always; a listed viewer when the owner
    allows it; the public never."""
    if visitor.role in ("owner", "operator"):
        return True
    if visitor.role == "viewer":
        config = BoardConfig.objects.filter(lobby=lobby).first()
        return bool(config and config.viewers_get_notifications)
    return False


def set_viewers_get_notifications(actor: Actor, lobby_id: int, allowed: bool) -> None:
    """The owner lets listed viewers turn on this lobby's pushes (off until they say);
    turning it off stops pushes to viewers' devices at once (they are checked per push)."""
    with transaction.atomic():
        lobby = owned(actor, lobby_id)
        config, _ = BoardConfig.objects.get_or_create(
            lobby=lobby, defaults={"updated_at": timezone.now()}
        )
        if config.viewers_get_notifications == allowed:
            return
        BoardConfig.objects.filter(pk=config.pk).update(
            viewers_get_notifications=allowed, updated_at=timezone.now()
        )
        audit(
            actor,
            AuditAction.VISIBILITY_CHANGED,
            lobby,
            "viewer notifications " + ("on" if allowed else "off"),
        )


def _key_bytes(value: str, name: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(value + "=" * (-len(value) % 4))
    except (binascii.Error, ValueError):
        raise bad_request(f"keys.{name} is not base64url", code=ErrorCode.INVALID_FIELD) from None


@dataclass(frozen=True)
class DeviceKeys:
    p256dh: str
    auth: str


def subscribe_device(
    visitor: Visitor, lobby: Lobby, endpoint: str, keys: DeviceKeys
) -> PushSubscription:
    """Store this device's subscription for `visitor`: the same endpoint again refreshes
    its keys; another person's endpoint is refused (409 push_endpoint_taken)."""
    if not may_get_pushes(visitor, lobby):
        raise forbidden(
            ErrorCode.FORBIDDEN,
            "only this lobby's owner (or a viewer the owner allows) gets its pushes",
        )
    p256dh = _key_bytes(keys.p256dh, "p256dh")
    if len(p256dh) != 65 or p256dh[0] != 4:
        raise bad_request(
            "keys.p256dh must be an uncompressed P-256 point", code=ErrorCode.INVALID_FIELD
        )
    if len(_key_bytes(keys.auth, "auth")) != 16:
        raise bad_request("keys.auth must be 16 bytes", code=ErrorCode.INVALID_FIELD)
    try:
        check_endpoint(endpoint)
    except EndpointRefused as refused:
        raise bad_request(str(refused), code=ErrorCode.PUSH_ENDPOINT_REFUSED) from None
    account_id = visitor.account.pk if visitor.account is not None else None
    try:
        with transaction.atomic():
            return _store_subscription(lobby, account_id, endpoint, keys)
    except IntegrityError:  # the same endpoint stored by another request meanwhile
        raise _taken() from None


def _taken() -> BrokerError:
    return conflict(
        ErrorCode.PUSH_ENDPOINT_TAKEN,
        "this device's notifications in this lobby belong to another person; "
        "they turn them off first",
    )


def _store_subscription(
    lobby: Lobby, account_id: int | None, endpoint: str, keys: DeviceKeys
) -> PushSubscription:
    """The same endpoint again refreshes its keys, for its own person only: a subscription
    never changes hands. A person's `MAX_DEVICES`-th and later push out their oldest."""
    now = timezone.now()
    fresh = {"p256dh": keys.p256dh, "auth": keys.auth, "created_at": now}
    existing = (
        PushSubscription.objects.select_for_update().filter(lobby=lobby, endpoint=endpoint).first()
    )
    if existing is not None:
        if existing.account_id != account_id:
            raise _taken()
        PushSubscription.objects.filter(pk=existing.pk).update(**fresh)
        existing.refresh_from_db()
        return existing
    theirs = PushSubscription.objects.filter(lobby=lobby)
    if account_id is None:
        theirs = theirs.filter(account__isnull=True)  # the local operator
    else:
        theirs = theirs.filter(account_id=account_id)
    oldest = theirs.order_by("-created_at", "-pk").values_list("pk", flat=True)[MAX_DEVICES - 1 :]
    PushSubscription.objects.filter(pk__in=list(oldest)).delete()
    return PushSubscription.objects.create(
        lobby=lobby, account_id=account_id, endpoint=endpoint, **fresh
    )


def unsubscribe_device(visitor: Visitor, lobby: Lobby, endpoint: str) -> int:
    """Remove this person's subscription for `endpoint` (nobody else's); how many went."""
    with transaction.atomic():
        removed, _ = PushSubscription.objects.filter(
            lobby=lobby, endpoint=endpoint, account=visitor.account
        ).delete()
    return removed


def preferences_of(account: Account | None) -> AlertPreferences:
    """The person's preferences, or unsaved defaults."""
    found = AlertPreferences.objects.filter(account=account).first()
    return found or AlertPreferences(account=account, updated_at=timezone.now())


def set_alert_preferences(
    account: Account | None,
    *,
    time_zone: str,
    quiet_from: time | None,
    quiet_until: time | None,
    mail_when_waiting: bool,
    mail_after_minutes: int,
) -> AlertPreferences:
    try:
        ZoneInfo(time_zone)
    except (ZoneInfoNotFoundError, ValueError):
        raise bad_request(
            f"{time_zone!r} is not a time zone", code=ErrorCode.INVALID_FIELD
        ) from None
    if (quiet_from is None) != (quiet_until is None):
        raise bad_request("give quiet hours both a start and an end, or neither")
    if not 1 <= mail_after_minutes <= 1440:
        raise bad_request("mail_after_minutes must be between 1 and 1440")
    if mail_when_waiting and account is None:
        raise bad_request("the local operator has no address to mail; mail needs an account")
    with transaction.atomic():
        preferences, _ = AlertPreferences.objects.update_or_create(
            account=account,
            defaults={
                "time_zone": time_zone,
                "quiet_from": quiet_from,
                "quiet_until": quiet_until,
                "mail_when_waiting": mail_when_waiting,
                "mail_after_minutes": mail_after_minutes,
                "updated_at": timezone.now(),
            },
        )
    return preferences


def unsubscribe_token(account: Account) -> str:
    """The unsubscribe link's key: signed with the broker's secret, so it needs no sign-in
    and no stored secret."""
    return signing.Signer(salt=UNSUBSCRIBE_SALT).sign(str(account.pk))


def stop_mail(token: str) -> Account:
    """The unsubscribe link: mail stops for the account the token names."""
    try:
        account_id = int(signing.Signer(salt=UNSUBSCRIBE_SALT).unsign(token))
    except (signing.BadSignature, ValueError):
        raise not_found(
            ErrorCode.UNKNOWN_LINK, "this unsubscribe link is not one this broker made"
        ) from None
    with transaction.atomic():
        account = Account.objects.filter(pk=account_id).first()
        if account is None:
            raise not_found(ErrorCode.UNKNOWN_LINK, "the account of this link no longer exists")
        AlertPreferences.objects.filter(account=account).update(
            mail_when_waiting=False, updated_at=timezone.now()
        )
    return account
