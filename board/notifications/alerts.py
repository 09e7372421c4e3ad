"""The owner in the loop: what waits on them becomes a push to their devices, and a mail
when it is still waiting.

Three steps, each run by the serve loop (pocolobby/loops.py), never by a request:
`watch_lobbies` turns changes in the store (an owner request set or changed, an agent that
needs attention, a new conversation waiting for a hand over, an owner reply that answers a
message) into `OwnerAlert` rows and settles the ones answered; `take_pushes` decides, in one
transaction, which pushes go out now (one per agent per minute, none in a person's quiet
hours); `send_pushes` sends them after commit with pywebpush, each bounded in time and
connected to the address its check approved, and drops a subscription the push service
says is gone (404/410). `LobbySenders` keeps lobbies apart: one lobby's hanging push
service never delays another lobby's pushes.
A message to `owner` that expects a reply queues its alert from the send's own transaction:
`notify_owner_of_message`, registered with lobbies/hooks.py by board/apps.py.

A push names the lobby, the agent and what waits (its owner-request line); it never carries
a message body.
"""

from __future__ import annotations

import concurrent.futures
import json
import logging
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, time, timedelta
from email.utils import parseaddr
from typing import Any
from urllib.parse import urlsplit
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from board.models import (
    AgentWatch,
    AlertPreferences,
    AlertReason,
    BoardConfig,
    OwnerAlert,
    PushSubscription,
)
from board.notifications.webpush_endpoints import EndpointRefused, check_endpoint
from board.notifications.webpush_transport import PinnedSession, PushUnanswered
from console.models import DashboardViewer, LobbyOwner
from lobbies import question_selectors
from lobbies.access.hosts import account_origin, hosted, public_origin
from lobbies.models import Agent, Lobby, Message
from lobbies.names import OWNER_SENDER
from lobbies.push import presence
from lobbies.question_selectors import asks_owner

log = logging.getLogger("pocolobby.alerts")

COALESCE = timedelta(minutes=1)
PUSH_TTL_SECONDS = 12 * 60 * 60
# A push's whole time, connect to answer: a push service that hangs or trickles is
# abandoned after it (board/notifications/webpush_transport.py).
PUSH_SECONDS = 10.0
# Lobbies sent at once, one worker each, and the pushes a lobby may have waiting for its
# worker (LobbySenders).
PUSH_WORKERS = 8
PUSH_BACKLOG = 50
GONE = (404, 410)

# Where a tap opens, relative to the lobby's pages.
PLACES = {
    AlertReason.OWNER_REQUEST: "#waiting",
    AlertReason.MESSAGE: "#waiting",
    AlertReason.HANDOVER: "#agents",
    AlertReason.ATTENTION: "#agents",
}


# --- hooks for other features -------------------------------------------------------------


def _queue(
    lobby: Lobby, agent_id: str, reason: AlertReason, line: str, message_id: int | None
) -> OwnerAlert:
    return OwnerAlert.objects.create(
        lobby=lobby,
        agent_id=agent_id,
        reason=reason,
        line=line[:300],
        message_id=message_id,
        created_at=timezone.now(),
    )


# What a question's push says its sender does, by the message's kind.
ASKED = {"question": "asks you a question", "request": "makes you a request"}


def notify_owner_of_message(message: Message) -> OwnerAlert | None:
    """A question to `owner` (lobbies/question_selectors.py): queue a push naming its sender
    and kind (never its words). Settled when the owner answers it. The send action calls it
    inside its transaction (lobbies.hooks.message_to_owner), so a send that rolls back
    queues nothing."""
    if message.sender is None or not asks_owner(message.kind, message.reply_expected):
        return None
    return _queue(
        message.lobby,
        message.sender_name,
        AlertReason.MESSAGE,
        f"{ASKED.get(message.kind or '', 'expects your reply')} (message {message.pk})",
        message.pk,
    )


# --- step 1: watch the store ---------------------------------------------------------------


def _watched_agents() -> Any:
    return (
        Agent.objects.filter(
            Q(owner_request_count__gt=0)
            | Q(notification_attention_required=True)
            | Q(owner_watch__request_count__gt=0)
            | Q(owner_watch__attention=True)
            | Q(waiting_runtime_id__isnull=False)
            | ~Q(owner_watch__handover_runtime="")
        )
        .exclude(agent_id=OWNER_SENDER)
        .select_related("lobby", "owner_watch")
    )


Seen = tuple[int, str, bool, str]


def _seen(agent: Agent, now: datetime) -> Seen:
    """The facts the watch compares: request count and line, attention (enabled agents), the
    runtime of a conversation waiting for a hand over."""
    count = agent.owner_request_count if agent.enabled else 0
    line = agent.owner_request_line if count else ""
    attention = bool(agent.notification_attention_required and agent.enabled)
    return count, line, attention, presence.waiting_runtime(agent, now) or ""


def _last_seen(watch: AgentWatch | None) -> Seen:
    if watch is None:
        return 0, "", False, ""
    return watch.request_count, watch.request_line, watch.attention, watch.handover_runtime


def _anything_changed(now: datetime) -> bool:
    """The cheap check every pass makes: plain values, no model instances."""
    rows = (
        _watched_agents()
        .values_list(
            "enabled",
            "owner_request_count",
            "owner_request_line",
            "notification_attention_required",
            "waiting_runtime_id",
            "waiting_since",
            "waiting_seen_at",
            "owner_watch__request_count",
            "owner_watch__request_line",
            "owner_watch__attention",
            "owner_watch__handover_runtime",
        )
        .order_by()
    )
    for row in rows:
        enabled, count, line, attention, waiting, since, seen_at = row[:7]
        count = count if enabled else 0
        waiting = presence.still_waiting(waiting, since, seen_at, now) or ""
        now_seen = (count, line if count else "", bool(attention and enabled), waiting)
        seen_count, seen_line, seen_attention, seen_waiting = row[7:]
        last = (seen_count or 0, seen_line or "", bool(seen_attention), seen_waiting or "")
        if now_seen != last:
            return True
    return False


def watch_lobbies(now: datetime | None = None) -> int:
    """Turn changes since the last pass into alerts and settle answered ones; returns how
    many alerts it queued. Only a change makes an alert: an agent repeating the same
    request line does not push again. A pass with nothing to do writes nothing."""
    now = now or timezone.now()
    waiting_messages = OwnerAlert.objects.filter(
        reason=AlertReason.MESSAGE, settled_at__isnull=True
    ).exists()
    if not waiting_messages and not _anything_changed(now):
        return 0
    queued = 0
    with transaction.atomic():
        for agent in _watched_agents():
            if _seen(agent, now) != _last_seen(getattr(agent, "owner_watch", None)):
                watch = getattr(agent, "owner_watch", None) or AgentWatch(agent=agent)
                queued += _watch_agent(agent, watch, now)
        _settle_answered_messages(now)
    return queued


def _settle(agent: Agent, reason: AlertReason, now: datetime) -> None:
    OwnerAlert.objects.filter(
        lobby_id=agent.lobby_id, agent_id=agent.agent_id, reason=reason, settled_at__isnull=True
    ).update(settled_at=now)


def _watch_agent(agent: Agent, watch: AgentWatch, now: datetime) -> int:
    queued = 0
    count, line, attention, waiting = _seen(agent, now)
    if (count, line) != (watch.request_count, watch.request_line):
        _settle(agent, AlertReason.OWNER_REQUEST, now)
        if count:
            shown = line or f"{count} request{'s' if count != 1 else ''} for you"
            _queue(agent.lobby, agent.agent_id, AlertReason.OWNER_REQUEST, shown, None)
            queued += 1
    if attention != watch.attention:
        _settle(agent, AlertReason.ATTENTION, now)
        if attention:
            said = "stopped taking notifications and needs your attention"
            _queue(agent.lobby, agent.agent_id, AlertReason.ATTENTION, said, None)
            queued += 1
    if waiting != watch.handover_runtime:
        _settle(agent, AlertReason.HANDOVER, now)
        if waiting:
            said = "a new conversation is waiting to take over: hand over or let it wait"
            _queue(agent.lobby, agent.agent_id, AlertReason.HANDOVER, said, None)
            queued += 1
    watch.request_count, watch.request_line, watch.attention = count, line, attention
    watch.handover_runtime = waiting
    watch.save()
    return queued


def _settle_answered_messages(now: datetime) -> None:
    """A question's alert settles when the owner has answered it, by the one rule of
    lobbies/question_selectors.py (a reply naming it), or when it is gone (retention)."""
    open_alerts = dict(
        OwnerAlert.objects.filter(reason=AlertReason.MESSAGE, settled_at__isnull=True).values_list(
            "pk", "message_id"
        )
    )
    if not open_alerts:
        return
    states = question_selectors.question_states(m for m in open_alerts.values() if m)
    # Answered, or no longer a question to the owner (swept, its sender removed).
    settled = [pk for pk, m in open_alerts.items() if m not in states or states[m] is not None]
    if settled:
        OwnerAlert.objects.filter(pk__in=settled).update(settled_at=now)


SETTLED_KEPT = timedelta(days=7)


def sweep_settled_alerts(now: datetime) -> dict[str, int]:
    """The retention sweep's share: alerts settled and handled a week ago are history."""
    old = OwnerAlert.objects.filter(settled_at__lte=now - SETTLED_KEPT, pushed_at__isnull=False)
    return {"owner_alerts": old.delete()[0] if old.exists() else 0}


# --- who gets what -------------------------------------------------------------------------


def in_quiet_hours(preferences: AlertPreferences | None, now: datetime) -> bool:
    """Whether `now` falls in the person's quiet hours, read in their own time zone."""
    if preferences is None or preferences.quiet_from is None or preferences.quiet_until is None:
        return False
    try:
        zone = ZoneInfo(preferences.time_zone)
    except (ZoneInfoNotFoundError, ValueError):
        zone = ZoneInfo("UTC")
    local: time = now.astimezone(zone).time().replace(tzinfo=None)
    start, end = preferences.quiet_from, preferences.quiet_until
    if start == end:
        return False
    if start < end:
        return start <= local < end
    return local >= start or local < end


def _preferences(account_ids: Iterable[int | None]) -> dict[int | None, AlertPreferences]:
    ids = set(account_ids)
    wanted = Q(account_id__in=[a for a in ids if a is not None])
    if None in ids:
        wanted |= Q(account__isnull=True)
    return {row.account_id: row for row in AlertPreferences.objects.filter(wanted)}


def receiving_subscriptions(lobby: Lobby) -> list[PushSubscription]:
    """The subscriptions of people who may have this lobby's pushes now: its owner, listed
    viewers when the owner allows it, and on a local broker the operator."""
    subscriptions = PushSubscription.objects.filter(lobby=lobby).select_related("account")
    if not hosted():
        return [s for s in subscriptions if s.account_id is None]
    owner = LobbyOwner.objects.filter(lobby=lobby, account__enabled=True).first()
    config = BoardConfig.objects.filter(lobby=lobby).first()
    viewers: set[str] = set()
    if config is not None and config.viewers_get_notifications:
        viewers = set(DashboardViewer.objects.filter(lobby=lobby).values_list("email", flat=True))
    chosen = []
    for sub in subscriptions:
        if sub.account is None or not sub.account.enabled:
            continue
        if (
            owner is not None and sub.account_id == owner.account_id
        ) or sub.account.email in viewers:
            chosen.append(sub)
    return chosen


# --- step 2: decide the pushes -------------------------------------------------------------


@dataclass(frozen=True)
class Push:
    lobby_id: int
    subscription_id: int
    endpoint: str
    p256dh: str
    auth: str
    payload: dict[str, Any] = field(default_factory=dict)


def payload_of(lobby: Lobby, alerts: list[OwnerAlert]) -> dict[str, Any]:
    """What the notification says: lobby, agent, what waits; the place a tap opens."""
    latest = alerts[-1]
    more = len(alerts) - 1
    body = latest.line + (f" (and {more} more)" if more else "")
    return {
        "title": f"{lobby.name}: {latest.agent_id} waits on you",
        "body": body,
        "lobby": lobby.name,
        "agent": latest.agent_id,
        "reason": latest.reason,
        "place": PLACES[AlertReason(latest.reason)],
        "tag": f"{lobby.name}/{latest.agent_id}",
    }


def take_pushes(now: datetime | None = None) -> list[Push]:
    """The pushes to send now; marks their alerts handled in the same transaction.

    An agent pushed less than a minute ago waits (its alerts stay queued and go out as one
    push when the minute is up); an alert already answered is dropped unsent; a person in
    quiet hours is skipped.
    """
    now = now or timezone.now()
    pushes: list[Push] = []
    if not OwnerAlert.objects.filter(pushed_at__isnull=True).exists():
        return pushes
    with transaction.atomic():
        queued = list(
            OwnerAlert.objects.filter(pushed_at__isnull=True)
            .select_related("lobby")
            .order_by("created_at", "pk")
        )
        groups: dict[tuple[int, str], list[OwnerAlert]] = defaultdict(list)
        for alert in queued:
            groups[(alert.lobby_id, alert.agent_id)].append(alert)
        for (lobby_id, agent_id), alerts in groups.items():
            agent = Agent.objects.filter(lobby_id=lobby_id, agent_id=agent_id).first()
            watch = AgentWatch.objects.filter(agent=agent).first() if agent else None
            if watch and watch.last_push_at and now - watch.last_push_at < COALESCE:
                continue
            handled = [a.pk for a in alerts]
            waiting = [a for a in alerts if a.settled_at is None]
            going = _pushes_for(alerts[0].lobby, waiting, now) if waiting else []
            if going:
                pushes.extend(going)
                if agent is not None:
                    watch = watch or AgentWatch(agent=agent)
                    watch.last_push_at = now
                    watch.save()
            OwnerAlert.objects.filter(pk__in=handled).update(pushed_at=now)
    return pushes


def _pushes_for(lobby: Lobby, alerts: list[OwnerAlert], now: datetime) -> list[Push]:
    subscriptions = receiving_subscriptions(lobby)
    preferences = _preferences(s.account_id for s in subscriptions)
    payload = payload_of(lobby, alerts)
    return [
        Push(lobby.pk, s.pk, s.endpoint, s.p256dh, s.auth, payload)
        for s in subscriptions
        if not in_quiet_hours(preferences.get(s.account_id), now)
    ]


# --- step 3: send, after commit ------------------------------------------------------------


def vapid_subject() -> str:
    """Who runs this broker, for the push service: the hosted site (or a one-host broker's
    public origin), else the mail sender."""
    if hosted() and account_origin().startswith("https://"):
        return account_origin()
    if public_origin():
        # py_vapid takes no port in an https subject; the name is the contact anyway.
        return f"https://{urlsplit(public_origin()).hostname}"
    address = parseaddr(settings.DEFAULT_FROM_EMAIL)[1] or "no-reply@localhost"
    return f"mailto:{address}"


Sent = tuple[int, str]  # (subscription id, "sent" | "gone" | "failed" | "refused")


def send_pushes(pushes: list[Push], vapid: Any, seconds: float = PUSH_SECONDS) -> list[Sent]:
    """Send each push, each within `seconds` from connect to answer, to the address its
    endpoint check approved (board/notifications/webpush_transport.py). Touches no database,
    so the loop runs it on a thread of its own (on SQLite the one database thread must never
    wait for a push service).

    Logs name the subscription's number, never its endpoint (a capability URL) or keys.
    """
    from pywebpush import (  # type: ignore[import-untyped]  # local: only the loop sends
        WebPushException,
        webpush,
    )

    results: list[Sent] = []
    for push in pushes:
        number = push.subscription_id
        try:
            endpoint = check_endpoint(push.endpoint)
            webpush(
                {"endpoint": push.endpoint, "keys": {"p256dh": push.p256dh, "auth": push.auth}},
                data=json.dumps(push.payload),
                vapid_private_key=vapid,
                vapid_claims={"sub": vapid_subject()},
                content_encoding="aes128gcm",
                timeout=seconds,
                ttl=PUSH_TTL_SECONDS,
                headers={"Urgency": "high"},
                requests_session=PinnedSession(endpoint, seconds),
            )
            results.append((number, "sent"))
        except EndpointRefused as refused:
            log.warning("push subscription %s refused: %s", number, refused)
            results.append((number, "refused"))
        except WebPushException as error:
            status = error.response.status_code if error.response is not None else None
            if status in GONE:
                log.info("push subscription %s is gone (%s): dropped", number, status)
                results.append((number, "gone"))
            else:
                log.warning("push to subscription %s failed with %s", number, status)
                results.append((number, "failed"))
        except PushUnanswered as error:
            log.warning("push to subscription %s failed: %s", number, error)
            results.append((number, "failed"))
        except ValueError as error:
            log.warning("push to subscription %s failed: %s", number, type(error).__name__)
            results.append((number, "failed"))
    return results


class LobbySenders:
    """Each lobby's pushes go out on a worker of one bounded pool, one worker per lobby at
    a time: a lobby whose push services hang holds one worker (each push for at most
    `PUSH_SECONDS`), and later pushes of that lobby queue behind its own, never another's.

    A lobby's queue keeps its newest `PUSH_BACKLOG` pushes; older ones are dropped as
    failed, so a lobby whose services hang for hours holds no growing list.
    Used by one thread (the alerts loop): `submit` hands over, `finished` collects what
    the workers have done, neither waits for a push service.
    """

    def __init__(self, workers: int = PUSH_WORKERS, seconds: float = PUSH_SECONDS) -> None:
        self.pool = concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="push")
        self.seconds = seconds
        self.running: dict[int, concurrent.futures.Future[list[Sent]]] = {}
        self.queued: dict[int, list[Push]] = defaultdict(list)
        self.vapid: Any = None
        self.dropped: list[Sent] = []

    def submit(self, pushes: list[Push], vapid: Any) -> None:
        if vapid is not None:
            self.vapid = vapid
        for push in pushes:
            self.queued[push.lobby_id].append(push)
        for lobby_id, queue in self.queued.items():
            if len(queue) > PUSH_BACKLOG:
                old, self.queued[lobby_id] = queue[:-PUSH_BACKLOG], queue[-PUSH_BACKLOG:]
                log.warning(
                    "lobby %s: %s pushes dropped behind a slow push service", lobby_id, len(old)
                )
                self.dropped.extend((push.subscription_id, "failed") for push in old)
        self._start()

    def _start(self) -> None:
        for lobby_id in [id_ for id_ in self.queued if id_ not in self.running]:
            pushes = self.queued.pop(lobby_id)
            self.running[lobby_id] = self.pool.submit(send_pushes, pushes, self.vapid, self.seconds)

    def finished(self) -> list[Sent]:
        """What the workers finished since the last call; starts each lobby's next."""
        results, self.dropped = self.dropped, []
        for lobby_id, future in list(self.running.items()):
            if not future.done():
                continue
            del self.running[lobby_id]
            try:
                results.extend(future.result())
            except Exception:
                log.exception("the pushes of lobby %s failed", lobby_id)
        self._start()
        return results

    def shutdown(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)


def record_sends(results: list[Sent]) -> dict[str, int]:
    """After the sends: drop the subscriptions the push service said are gone (404/410)."""
    outcome = {"sent": 0, "dropped": 0, "failed": 0, "refused": 0}
    names = {"sent": "sent", "gone": "dropped", "failed": "failed", "refused": "refused"}
    for _, what in results:
        outcome[names[what]] += 1
    gone = [number for number, what in results if what == "gone"]
    sent = [number for number, what in results if what == "sent"]
    if gone:
        PushSubscription.objects.filter(pk__in=gone).delete()
    if sent:
        PushSubscription.objects.filter(pk__in=sent).update(last_pushed_at=timezone.now())
    return outcome


def push_pass(now: datetime | None = None) -> dict[str, int]:
    """Watch, decide (committed), send, record: the loop's steps in one call."""
    # local: py_vapid and the broker's keys load only in the loop that sends
    from board.notifications.vapid import broker_vapid

    watch_lobbies(now)
    pushes = take_pushes(now)
    return record_sends(send_pushes(pushes, broker_vapid() if pushes else None))
