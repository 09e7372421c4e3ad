"""Sign-in mail: through Django's EMAIL_BACKEND (Postmark when configured).

Without Postmark settings the broker still starts; the sign-in page names what is missing and
no code is ever "sent" into nowhere.
"""

from __future__ import annotations

from collections.abc import Sequence

from django.conf import settings
from django.core.mail import EmailMessage, send_mail
from django.core.mail.backends.base import BaseEmailBackend
from postmarker.core import PostmarkClient
from postmarker.django import EmailBackend as PostmarkerBackend

MISSING = "mail is not configured: set POSTMARK_TOKEN and POCOLOBBY_MAIL_FROM"


class MailNotConfigured(Exception):
    """Raised by the stand-in backend: there is no way to send mail yet."""


class MailFailed(Exception):
    """The mail service refused or failed; the message says what it answered."""


class MissingMailBackend(BaseEmailBackend):
    """The backend selected when POSTMARK_TOKEN is unset: it refuses, saying what is missing."""

    def send_messages(self, email_messages: Sequence[EmailMessage]) -> int:
        raise MailNotConfigured(MISSING)


class PostmarkBackend(PostmarkerBackend):
    """postmarker's Django backend, with Postmark's API address from settings.POSTMARK
    (ROOT_API_URL), which postmarker's own backend cannot be told."""

    client: PostmarkClient | None

    def open(self) -> bool:
        if self.client is None:
            self.client = PostmarkClient(
                server_token=self.server_token,
                verbosity=self.get_option("VERBOSITY"),
                root_api_url=self.get_option("ROOT_API_URL") or "https://api.postmarkapp.com/",
            )
            return True
        return False


def mail_problem() -> str:
    """What stops sign-in mail from going out, or "" when it can."""
    backend = settings.EMAIL_BACKEND
    if backend == "console.mail.MissingMailBackend":
        return MISSING
    uses_postmark = backend.startswith("postmarker.") or backend == "console.mail.PostmarkBackend"
    if uses_postmark and not settings.POCOLOBBY_MAIL_FROM:
        return MISSING
    return ""


def send_code(email: str, code: str) -> None:
    """Mail one sign-in code; a refusal by the service becomes MailFailed with its words."""
    subject = f"Your PocoLobby sign-in code: {code}"
    body = (
        f"Your PocoLobby sign-in code is {code}.\n\n"
        "It works for ten minutes. If you did not ask for it, ignore this mail.\n"
    )
    try:
        send_mail(subject, body, settings.DEFAULT_FROM_EMAIL, [email], fail_silently=False)
    except MailNotConfigured:
        raise
    except Exception as error:  # the service's own exception types vary by backend
        raise MailFailed(f"the mail service refused to send the code: {error}") from None
