"""The network half of the owner's alerts: pushes per lobby (alerts.LobbySenders) and the
still-waiting mail on a thread of its own, so mail never waits behind a push service and
no lobby behind another's. No database here; the alerts loop (pocolobby/loops.py) hands
work over and collects what finished, never waiting for a send.
"""

from __future__ import annotations

import concurrent.futures
from typing import Any

from board.notifications import alerts, waiting_mail


def _send_mails(mails: list[waiting_mail.WaitingMail]) -> list[int]:
    return [pk for mail in mails if waiting_mail.send_waiting_mail(mail) for pk in mail.alert_ids]


class AlertSenders:
    """Used by one thread: `submit` hands over, `finished` collects."""

    def __init__(self, seconds: float = alerts.PUSH_SECONDS) -> None:
        self.pushes = alerts.LobbySenders(seconds=seconds)
        self.mailer = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="alert-mail")
        self.mailing: concurrent.futures.Future[list[int]] | None = None

    @property
    def mail_free(self) -> bool:
        """No mail going out: a mail is marked only once sent, so while one goes out the
        pass must not look for due mail (it would find the same again)."""
        return self.mailing is None

    def submit(
        self, pushes: list[alerts.Push], vapid: Any, mails: list[waiting_mail.WaitingMail]
    ) -> None:
        self.pushes.submit(pushes, vapid)
        if mails and self.mailing is None:
            self.mailing = self.mailer.submit(_send_mails, mails)

    def finished(self) -> tuple[list[alerts.Sent], list[int]]:
        """The pushes finished since the last call, and the alerts mailed."""
        mailed: list[int] = []
        if self.mailing is not None and self.mailing.done():
            done, self.mailing = self.mailing, None
            mailed = done.result()
        return self.pushes.finished(), mailed

    def shutdown(self) -> None:
        self.pushes.shutdown()
        self.mailer.shutdown(wait=False)
