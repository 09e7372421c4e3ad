"""Email-code sign-in: six digits, ten minutes, five tries, stored only as MACs.

Known, unknown and disabled addresses take the same path, write the same rows and get the same
answers; only a known, enabled address is mailed. An unknown address gets a code row too (a
random code nobody receives), so trying a code reveals nothing either.

Guessing does not scale with networks (docs/DECISIONS.md, "Sign-in limits"): the limits on
codes (one a minute, five an hour) and wrong codes (ten an hour) count per address whatever
the network, each address has one live code (a new one replaces it), and that code works only
in the browser that asked for it (a cookie). Per-network limits stand guard on top.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from console import mail
from console.models import (
    Account,
    DashboardViewer,
    Handoff,
    SessionPlace,
    SignInCode,
    SignInThrottle,
    ThrottleKind,
    WebSession,
)
from console.web import PageRefusal, digest
from lobbies.access.secret_files import admin_token
from lobbies.errors import ErrorCode

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


def code_key(email: str) -> str:
    """Where the address's one live code is kept."""
    return _mac(f"code for\0{email}")


def browser_mac(browser: str) -> str:
    """The browser a code was asked for by, as its sign-in cookie's MAC."""
    return _mac(f"browser\0{browser}")


def _per_address(purpose: str, name: str) -> str:
    return _mac(f"{purpose}\0{name}")


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


def _held_code_row(email: str, now: datetime) -> SignInCode:
    """The address's code row, locked for this transaction (made empty and expired if there is
    none), so an address's requests are counted one at a time: PostgreSQL would otherwise run
    two side by side, and both would pass the minute's limit."""
    key = code_key(email)
    SignInCode.objects.get_or_create(
        address_mac=key, defaults={"code_mac": "", "expires_at": now, "created_at": now}
    )
    return SignInCode.objects.select_for_update().get(address_mac=key)


def request_code(email: str, client: str, browser: str) -> None:
    """Count the request, store a fresh code for the address (replacing any before it) bound to
    this browser, and mail it if the address may sign in.

    `client` is the client's network (lobbies/access/clients.py), `browser` the random value of the
    asking browser's sign-in cookie. Refusals read the same for every address.
    """
    problem = mail.mail_problem()
    if problem:
        raise PageRefusal(503, problem, ErrorCode.MAIL_NOT_CONFIGURED)
    email = normalise_email(email)
    sent_key = _per_address("sent", email)
    client_key = _client_key("code", client)
    now = timezone.now()
    with transaction.atomic():
        row = _held_code_row(email, now)
        if _count(ThrottleKind.CLIENT, client_key, HOUR) >= CLIENT_CODE_REQUESTS_PER_HOUR:
            raise PageRefusal(
                429,
                "too many codes were asked for from your network this hour; try later",
                ErrorCode.THROTTLED,
            )
        if _count(ThrottleKind.CODE_SENT, sent_key, timedelta(minutes=1)) >= CODES_PER_MINUTE:
            raise PageRefusal(
                429,
                "a code was sent to this address less than a minute ago; wait a minute",
                ErrorCode.THROTTLED,
            )
        if _count(ThrottleKind.CODE_SENT, sent_key, HOUR) >= CODES_PER_HOUR:
            raise PageRefusal(
                429,
                "five codes were sent to this address in the last hour; try again later",
                ErrorCode.THROTTLED,
            )
        _record(ThrottleKind.CLIENT, client_key)
        _record(ThrottleKind.CODE_SENT, sent_key)
        code = _new_code()
        row.browser_mac, row.code_mac = browser_mac(browser), code_mac(email, code)
        row.expires_at, row.tries, row.created_at = now + CODE_LIFETIME, 0, now
        row.save()
        deliver = may_sign_in(email)
    if deliver:
        try:
            mail.send_code(email, code)
        except mail.MailNotConfigured:
            raise PageRefusal(503, mail.MISSING, ErrorCode.MAIL_NOT_CONFIGURED) from None
        except mail.MailFailed as failure:
            raise PageRefusal(502, str(failure), ErrorCode.MAIL_FAILED) from None


def guesses_refused(purpose: str, name: str, client: str) -> PageRefusal | None:
    """The refusal due before checking one more secret for `name` from `client`, if any.

    Counts the attempt against the network; the wrong ones `name` had in the last hour count
    whatever network they came from. Sign-in codes and the Django admin's passwords share
    these limits.
    """
    client_key = _client_key(purpose, client)
    if _count(ThrottleKind.CLIENT, client_key, HOUR) >= CLIENT_VERIFY_ATTEMPTS_PER_HOUR:
        return PageRefusal(
            429,
            "too many sign-in attempts from your network this hour; try later",
            ErrorCode.THROTTLED,
        )
    _record(ThrottleKind.CLIENT, client_key)
    if _count(ThrottleKind.WRONG_CODE, _per_address(purpose, name), HOUR) >= WRONG_CODES_PER_HOUR:
        return PageRefusal(
            429,
            "too many wrong tries for this address in the last hour; try again later",
            ErrorCode.THROTTLED,
        )
    return None


def count_wrong_guess(purpose: str, name: str) -> None:
    _record(ThrottleKind.WRONG_CODE, _per_address(purpose, name))


@dataclass(frozen=True)
class SignedIn:
    account: Account
    token: str


def _outcome(email: str, code: str, client: str, browser: str) -> SignedIn | PageRefusal:
    """One verification in one transaction; a refusal is returned so its counts commit."""
    now = timezone.now()
    # Locked before counting, so an address's guesses meet its limit one at a time.
    live = SignInCode.objects.select_for_update().filter(address_mac=code_key(email)).first()
    refused = guesses_refused("verify", email, client)
    if refused is not None:
        return refused
    if live is None or not browser or live.browser_mac != browser_mac(browser):
        # Not a guess at this address's code: it counts against the network only.
        return PageRefusal(
            400,
            "there is no code for this address in this browser (a newer code replaces an "
            "older one); ask for one here",
            ErrorCode.NO_CODE,
        )
    if live.expires_at <= now:
        live.delete()
        return PageRefusal(400, "that code has expired; ask for a new one", ErrorCode.CODE_EXPIRED)
    if live.tries >= TRIES_PER_CODE:
        return PageRefusal(
            400, "this code has had five wrong tries; ask for a new one", ErrorCode.CODE_EXHAUSTED
        )
    right = hmac.compare_digest(live.code_mac, code_mac(email, code)) and may_sign_in(email)
    if not right:
        SignInCode.objects.filter(pk=live.pk).update(tries=live.tries + 1)
        count_wrong_guess("verify", email)
        left = TRIES_PER_CODE - live.tries - 1
        return PageRefusal(
            400,
            f"that code is not right; {left} tr{'y' if left == 1 else 'ies'} left for it"
            if left
            else "that code is not right, and this code has no tries left; ask for a new one",
            ErrorCode.WRONG_CODE,
        )
    live.delete()
    account, _ = Account.objects.get_or_create(email=email, defaults={"created_at": now})
    return SignedIn(account, WebSession.open(account, None, now, SESSION_LIFETIME))


def verify_code(email: str, code: str, client: str, browser: str) -> SignedIn:
    """Consume a right code this browser asked for and start an account-area session."""
    email = normalise_email(email)
    code = code.strip()
    if not (len(code) == 6 and code.isascii() and code.isdigit()):
        raise PageRefusal(400, "the code is the six digits from the mail", ErrorCode.INVALID_FIELD)
    with transaction.atomic():
        outcome = _outcome(email, code, client, browser)
    if isinstance(outcome, PageRefusal):
        raise outcome
    return outcome


def end_session(token: str, place: SessionPlace) -> None:
    """Sign-out: the session row goes; the cookie is cleared by the view."""
    if token:
        WebSession.objects.filter(token_hash=digest(token), place=place).delete()


@dataclass(frozen=True)
class SignedOut:
    """What `sign_everyone_out` removed."""

    sessions: int
    handoffs: int
    codes: int


def sign_everyone_out() -> SignedOut:
    """Every browser signs in again: all sessions, hand-offs and pending codes go.

    A restore runs it on the restored store (pocolobby/restore.py): a backup's sessions
    would bring back signed-out browsers, removed viewers and disabled accounts for up to
    the sessions' 30 days. Throttle rows stay: they only count, and they expire in an hour.
    """
    with transaction.atomic():
        return SignedOut(
            sessions=WebSession.objects.all().delete()[0],
            handoffs=Handoff.objects.all().delete()[0],
            codes=SignInCode.objects.all().delete()[0],
        )
