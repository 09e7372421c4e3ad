"""Mail when something still waits: a digest to an owner who opted in, after their chosen
minutes, at most one per owner and lobby every `MAIL_SPACING`, through Django's
EMAIL_BACKEND (Postmark in production).

Never an agent's words: the mail names the lobby, each agent and how many of what wait on
the owner (an agent's owner-request line is its own text, which a mail must not carry to a
mailbox), links to the dashboard, and carries an unsubscribe link that needs no sign-in.
RFC 8058's one-click headers go along for backends that pass headers on; postmarker's
Django backend sends only the standard fields, so the link in the text is the one that
always works.
"""

from __future__ import annotations

import logging
from collections import Counter, defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.core.mail import EmailMessage
from django.utils import timezone

from board.models import AlertPreferences, AlertReason, OwnerAlert
from board.notifications.alerts import in_quiet_hours
from board.notifications.preferences import unsubscribe_token
from console.models import LobbyOwner
from lobbies.access.hosts import lobby_origin

log = logging.getLogger("pocolobby.alerts")

# The least time between two mails to an owner about one lobby: a burst of waits is one mail.
MAIL_SPACING = timedelta(minutes=5)

# What waits, counted: (one, many).
WHAT = {
    AlertReason.OWNER_REQUEST: ("an owner request", "owner requests"),
    AlertReason.MESSAGE: ("a question for you", "questions for you"),
    AlertReason.HANDOVER: ("a conversation waiting to take over", "conversations waiting"),
    AlertReason.ATTENTION: ("needs your attention", "needs your attention"),
}


@dataclass(frozen=True)
class WaitingMail:
    to: str
    subject: str
    body: str
    unsubscribe: str
    alert_ids: tuple[int, ...]


def _agent_line(agent_id: str, alerts: list[OwnerAlert]) -> str:
    counts = Counter(AlertReason(a.reason) for a in alerts)
    said = []
    for reason, (one, many) in WHAT.items():
        count = counts.get(reason, 0)
        if reason == AlertReason.ATTENTION and count:
            said.append(one)
        elif count:
            said.append(one if count == 1 else f"{count} {many}")
    since = min(a.created_at for a in alerts).strftime("%H:%M UTC")
    return f"- {agent_id}: {', '.join(said)} (waiting since {since})\n"


def _mailed_lately(lobby_ids: list[int], now: datetime) -> set[int]:
    """The lobbies whose owner was mailed less than `MAIL_SPACING` ago."""
    return set(
        OwnerAlert.objects.filter(lobby_id__in=lobby_ids, mailed_at__gt=now - MAIL_SPACING)
        .values_list("lobby_id", flat=True)
        .distinct()
    )


def due_mail(now: datetime | None = None) -> list[WaitingMail]:
    """The mails to send now: per owner and lobby, one digest of the waits past their
    minutes not mailed yet, unless that owner had one for that lobby lately. Reads only;
    `mail_pass` marks what went out."""
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
    lately = _mailed_lately(list(owners), now)
    grouped: dict[int, list[OwnerAlert]] = defaultdict(list)
    for alert in waiting:
        if alert.lobby_id in lately:
            continue
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
        agents: dict[str, list[OwnerAlert]] = defaultdict(list)
        for alert in alerts:
            agents[alert.agent_id].append(alert)
        subject = (
            f"{lobby.name}: {alerts[0].agent_id} still waits on you"
            if len(agents) == 1
            else f"{lobby.name}: {len(agents)} agents still wait on you"
        )
        body = (
            f"In lobby {lobby.name}, still unanswered:\n\n"
            + "".join(_agent_line(agent_id, theirs) for agent_id, theirs in agents.items())
            + f"\nOpen the dashboard to answer: {origin}/#waiting\n"
            + f"\nAt most one mail every {MAIL_SPACING.seconds // 60} minutes per lobby; "
            + "the next comes only when something new waits.\n"
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
