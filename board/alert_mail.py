"""Mail when something still waits: one mail per wait to an owner who opted in, after their
chosen minutes, through Django's EMAIL_BACKEND (Postmark in production).

No message bodies: the mail names the lobby, the agent and its owner-request line, links
to the place on the dashboard, and carries an unsubscribe link that needs no sign-in.
RFC 8058's one-click headers go along for backends that pass headers on; postmarker's
Django backend sends only the standard fields, so the link in the text is the one that
always works.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.core.mail import EmailMessage
from django.utils import timezone

from board.alert_settings import unsubscribe_token
from board.alerts import PLACES, in_quiet_hours
from board.models import AlertPreferences, AlertReason, OwnerAlert
from console.models import LobbyOwner
from lobbies.hosts import lobby_origin

log = logging.getLogger("pocolobby.alerts")


@dataclass(frozen=True)
class WaitingMail:
    to: str
    subject: str
    body: str
    unsubscribe: str
    alert_ids: tuple[int, ...]


def _line(alert: OwnerAlert, origin: str) -> str:
    place = PLACES[AlertReason(alert.reason)]
    link = f"{origin}/{place}"
    since = alert.created_at.strftime("%H:%M UTC")
    return f"- {alert.agent_id}: {alert.line} (waiting since {since})\n  {link}\n"


def due_mail(now: datetime | None = None) -> list[WaitingMail]:
    """The mails to send now: per owner and lobby, the waits past their minutes not mailed
    yet. Reads only; `mail_pass` marks what went out."""
    now = now or timezone.now()
    preferences = {
        p.account_id: p
        for p in AlertPreferences.objects.filter(
            mail_when_waiting=True, account__isnull=False, account__enabled=True
        )
    }
    if not preferences:
        return []
    owners = {
        o.lobby_id: o.account
        for o in LobbyOwner.objects.filter(
            account_id__in=[a for a in preferences if a]
        ).select_related("account")
    }
    waiting = (
        OwnerAlert.objects.filter(
            lobby_id__in=owners, settled_at__isnull=True, mailed_at__isnull=True
        )
        .select_related("lobby")
        .order_by("created_at", "pk")
    )
    grouped: dict[int, list[OwnerAlert]] = defaultdict(list)
    for alert in waiting:
        account = owners[alert.lobby_id]
        wanted = preferences[account.pk]
        if now - alert.created_at < timedelta(minutes=wanted.mail_after_minutes):
            continue
        if in_quiet_hours(wanted, now):
            continue
        grouped[alert.lobby_id].append(alert)
    mails = []
    for lobby_id, alerts in grouped.items():
        account = owners[lobby_id]
        lobby = alerts[0].lobby
        origin = lobby_origin(lobby.name)
        unsubscribe = f"{origin}/push/unsubscribe/{unsubscribe_token(account)}"
        count = len(alerts)
        subject = (
            f"{lobby.name}: {alerts[0].agent_id} still waits on you"
            if count == 1
            else f"{lobby.name}: {count} things still wait on you"
        )
        body = (
            f"In lobby {lobby.name}, still unanswered:\n\n"
            + "".join(_line(a, origin) for a in alerts)
            + "\nYou get one mail per wait; the next comes only when something new waits.\n"
            + f"Stop these mails (no sign-in needed): {unsubscribe}\n"
        )
        mails.append(
            WaitingMail(account.email, subject, body, unsubscribe, tuple(a.pk for a in alerts))
        )
    return mails


def send_waiting_mail(mail: WaitingMail) -> bool:
    """Send one mail; True when the backend took it. Logs never hold the address or text."""
    message = EmailMessage(
        mail.subject,
        mail.body,
        settings.DEFAULT_FROM_EMAIL,
        [mail.to],
        headers={
            "List-Unsubscribe": f"<{mail.unsubscribe}>",
            "List-Unsubscribe-Post": "List-Unsubscribe=One-Click",
        },
    )
    try:
        message.send(fail_silently=False)
    except Exception as error:  # the backend's own exception types vary
        log.warning("a still-waiting mail was not sent: %s", type(error).__name__)
        return False
    return True


def record_mailed(alert_ids: list[int]) -> None:
    """Each wait is mailed once: marked after its mail went out."""
    if alert_ids:
        OwnerAlert.objects.filter(pk__in=alert_ids).update(mailed_at=timezone.now())


def mail_pass(now: datetime | None = None) -> int:
    """Find what is due, send it, mark it: the loop's steps in one call."""
    sent = [mail for mail in due_mail(now) if send_waiting_mail(mail)]
    record_mailed([pk for mail in sent for pk in mail.alert_ids])
    return len(sent)
