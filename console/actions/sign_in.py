"""Email-code sign-in: six digits, ten minutes, five tries, stored only as address-bound MACs.

Known, unknown and disabled addresses take the same path, write the same rows and get the same
answers; only a known, enabled address is mailed. An unknown address gets a code row too (a
random code nobody receives), so trying a code reveals nothing either.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from console import mail
from console.models import (
    Account,
    DashboardViewer,
    SessionPlace,
    SignInCode,
    SignInThrottle,
    ThrottleKind,
    WebSession,
)
from console.web import PageRefusal, digest
from lobbies.secret_files import admin_token

CODE_LIFETIME = timedelta(minutes=10)
TRIES_PER_CODE = 5
WRONG_CODES_PER_HOUR = 10
CODES_PER_MINUTE = 1
CODES_PER_HOUR = 5
CLIENT_CODE_REQUESTS_PER_HOUR = 20
CLIENT_VERIFY_ATTEMPTS_PER_HOUR = 30
SESSION_LIFETIME = timedelta(days=30)
HOUR = timedelta(hours=1)


def normalise_email(value: str) -> str:
    return value.strip().lower()


@functools.cache
def _key_for(admin_token: str) -> bytes:
    return hmac.new(admin_token.encode(), b"pocolobby sign-in codes", hashlib.sha256).digest()


def _mac(message: str) -> str:
    key = _key_for(admin_token(settings.DATA_DIR))
    return hmac.new(key, message.encode("utf-8", "surrogatepass"), hashlib.sha256).hexdigest()


def address_mac(email: str) -> str:
    return _mac(f"address\0{email}")


def code_mac(email: str, code: str) -> str:
    return _mac(f"code\0{email}\0{code}")


def _client_key(purpose: str, bucket: str) -> str:
    return _mac(f"client\0{purpose}\0{bucket}")


def may_sign_in(email: str) -> bool:
    """An enabled account, or an address an owner listed as a viewer that has no account yet."""
    account = Account.objects.filter(email=email).first()
    if account is not None:
        return account.enabled
    return DashboardViewer.objects.filter(email=email).exists()


def _count(kind: ThrottleKind, key: str, since: timedelta) -> int:
    return SignInThrottle.objects.filter(kind=kind, key=key, at__gt=timezone.now() - since).count()


def _record(kind: ThrottleKind, key: str) -> None:
    SignInThrottle.objects.create(kind=kind, key=key, at=timezone.now())


def _new_code() -> str:
    return f"{secrets.randbelow(1_000_000):06d}"


def request_code(email: str, client: str) -> None:
    """Count the request, store a fresh code for the address and mail it if it may sign in.

    Refusals (throttles, mail not configured) read the same for every address.
    """
    problem = mail.mail_problem()
    if problem:
        raise PageRefusal(503, problem, "mail_not_configured")
    email = normalise_email(email)
    address = address_mac(email)
    client_key = _client_key("code", client)
    now = timezone.now()
    with transaction.atomic():
        if _count(ThrottleKind.CLIENT, client_key, HOUR) >= CLIENT_CODE_REQUESTS_PER_HOUR:
            raise PageRefusal(
                429,
                "too many codes were asked for from your network this hour; try later",
                "throttled",
            )
        if _count(ThrottleKind.CODE_SENT, address, timedelta(minutes=1)) >= CODES_PER_MINUTE:
            raise PageRefusal(
                429,
                "a code was sent to this address less than a minute ago; wait a minute",
                "throttled",
            )
        if _count(ThrottleKind.CODE_SENT, address, HOUR) >= CODES_PER_HOUR:
            raise PageRefusal(
                429,
                "five codes were sent to this address in the last hour; try again later",
                "throttled",
            )
        _record(ThrottleKind.CLIENT, client_key)
        _record(ThrottleKind.CODE_SENT, address)
        code = _new_code()
        SignInCode.objects.update_or_create(
            address_mac=address,
            defaults={
                "code_mac": code_mac(email, code),
                "expires_at": now + CODE_LIFETIME,
                "tries": 0,
                "created_at": now,
            },
        )
        deliver = may_sign_in(email)
    if deliver:
        try:
            mail.send_code(email, code)
        except mail.MailNotConfigured:
            raise PageRefusal(503, mail.MISSING, "mail_not_configured") from None
        except mail.MailFailed as failure:
            raise PageRefusal(502, str(failure), "mail_failed") from None


@dataclass(frozen=True)
class SignedIn:
    account: Account
    token: str


def _outcome(email: str, code: str, client: str) -> SignedIn | PageRefusal:
    """One verification in one transaction; a refusal is returned so its counts commit."""
    address = address_mac(email)
    client_key = _client_key("verify", client)
    now = timezone.now()
    if _count(ThrottleKind.CLIENT, client_key, HOUR) >= CLIENT_VERIFY_ATTEMPTS_PER_HOUR:
        return PageRefusal(
            429, "too many sign-in attempts from your network this hour; try later", "throttled"
        )
    _record(ThrottleKind.CLIENT, client_key)
    if _count(ThrottleKind.WRONG_CODE, address, HOUR) >= WRONG_CODES_PER_HOUR:
        return PageRefusal(
            429,
            "too many wrong codes for this address in the last hour; try again later",
            "throttled",
        )
    live = SignInCode.objects.select_for_update().filter(address_mac=address).first()
    if live is None:
        return PageRefusal(400, "there is no code for this address; ask for one first", "no_code")
    if live.expires_at <= now:
        live.delete()
        return PageRefusal(400, "that code has expired; ask for a new one", "code_expired")
    if live.tries >= TRIES_PER_CODE:
        return PageRefusal(
            400, "this code has had five wrong tries; ask for a new one", "code_exhausted"
        )
    right = hmac.compare_digest(live.code_mac, code_mac(email, code)) and may_sign_in(email)
    if not right:
        SignInCode.objects.filter(pk=live.pk).update(tries=live.tries + 1)
        _record(ThrottleKind.WRONG_CODE, address)
        left = TRIES_PER_CODE - live.tries - 1
        return PageRefusal(
            400,
            f"that code is not right; {left} tr{'y' if left == 1 else 'ies'} left for it"
            if left
            else "that code is not right, and this code has no tries left; ask for a new one",
            "wrong_code",
        )
    live.delete()
    account, _ = Account.objects.get_or_create(email=email, defaults={"created_at": now})
    return SignedIn(account, WebSession.open(account, None, now, SESSION_LIFETIME))


def verify_code(email: str, code: str, client: str) -> SignedIn:
    """Consume a right code and start an account-area session, in one transaction."""
    email = normalise_email(email)
    code = code.strip()
    if not (len(code) == 6 and code.isascii() and code.isdigit()):
        raise PageRefusal(400, "the code is the six digits from the mail", "invalid_field")
    with transaction.atomic():
        outcome = _outcome(email, code, client)
    if isinstance(outcome, PageRefusal):
        raise outcome
    return outcome


def end_session(token: str, place: SessionPlace) -> None:
    """Sign-out: the session row goes; the cookie is cleared by the view."""
    if token:
        WebSession.objects.filter(token_hash=digest(token), place=place).delete()
