"""People and their access: accounts, owners, viewers, sign-in codes, sessions and hand-offs.

Access is decided on every request by joins over these rows, so removing a viewer or
disabling an account applies to the next request. Secrets (codes, session and hand-off
tokens) are stored only as MACs or hashes.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import models
from django.db.models import Q
from django.db.models.functions import Lower, Trim

from console.web import new_secret
from lobbies.models import Lobby, closed_set


class Account(models.Model):
    """A person: an email address, trimmed and lowercased."""

    email = models.EmailField(max_length=254, unique=True)
    enabled = models.BooleanField(default=True)
    # The operator's allowance: this account may create up to three lobbies itself.
    may_create_lobbies = models.BooleanField(default=False)
    # The operator's mark: this account's email-code sign-in also opens the Django admin on a
    # hosted broker (console/access.py, OperatorAdmin).
    operator = models.BooleanField(
        default=False, help_text="Its email-code sign-in opens this admin on a hosted broker."
    )
    created_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(email=Lower(Trim("email"))),
                name="account_email_normalised",
            )
        ]

    def __str__(self) -> str:
        return self.email


class LobbyOwner(models.Model):
    """One owner per lobby."""

    lobby = models.OneToOneField(Lobby, on_delete=models.CASCADE, related_name="owner")
    account = models.ForeignKey(Account, on_delete=models.CASCADE, related_name="owned")
    created_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.account} owns {self.lobby}"


class DashboardViewer(models.Model):
    """An address the owner admitted to a private dashboard; it need not have an account yet."""

    lobby = models.ForeignKey(Lobby, on_delete=models.CASCADE, related_name="viewers")
    email = models.EmailField(max_length=254)
    created_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["lobby", "email"], name="viewer_unique_per_lobby")
        ]

    def __str__(self) -> str:
        return f"{self.email} views {self.lobby}"


class ApprovedRepository(models.Model):
    """A GitHub repository the operator let this lobby's rooms read notes from."""

    lobby = models.ForeignKey(Lobby, on_delete=models.CASCADE, related_name="repositories")
    repository = models.CharField(max_length=140)  # owner/name
    created_at = models.DateTimeField()

    class Meta:
        verbose_name_plural = "approved repositories"
        constraints = [
            models.UniqueConstraint(
                fields=["lobby", "repository"], name="repository_unique_per_lobby"
            )
        ]

    def __str__(self) -> str:
        return self.repository


class SignInCode(models.Model):
    """The one live code of an address, as an HMAC bound to that address; a new one replaces
    it. It works only in the browser that asked for it (`browser_mac`, its cookie's MAC)."""

    address_mac = models.CharField(max_length=64, unique=True)
    browser_mac = models.CharField(max_length=64, default="")
    code_mac = models.CharField(max_length=64)
    expires_at = models.DateTimeField()
    tries = models.PositiveSmallIntegerField(default=0)
    created_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"sign-in code {self.pk}"


class ThrottleKind(models.TextChoices):
    CODE_SENT = "code_sent"  # per address MAC, any network: one a minute, five an hour
    WRONG_CODE = "wrong_code"  # per address MAC, any network: ten an hour, surviving new codes
    CLIENT = "client"  # per client address (IPv6 by its /64)


class SignInThrottle(models.Model):
    """One counted event under a rate limit; rows older than an hour mean nothing."""

    kind = models.CharField(max_length=16, choices=ThrottleKind.choices)
    key = models.CharField(max_length=64)
    at = models.DateTimeField()

    class Meta:
        constraints = [
            models.CheckConstraint(condition=closed_set("kind", ThrottleKind), name="throttle_kind")
        ]
        indexes = [models.Index(fields=["kind", "key", "at"], name="throttle_lookup")]

    def __str__(self) -> str:
        return f"{self.kind} at {self.at}"


class SessionPlace(models.TextChoices):
    ACCOUNT = "account"  # the account area's host
    LOBBY = "lobby"  # one lobby's host: dashboard and, for its owner, settings


class WebSession(models.Model):
    """A browser session on one host, stored by the SHA-256 of its cookie token."""

    token_hash = models.CharField(max_length=64, unique=True)
    place = models.CharField(max_length=8, choices=SessionPlace.choices)
    account = models.ForeignKey(Account, on_delete=models.CASCADE, related_name="sessions")
    lobby = models.ForeignKey(
        Lobby, on_delete=models.CASCADE, null=True, blank=True, related_name="web_sessions"
    )
    created_at = models.DateTimeField()
    expires_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=closed_set("place", SessionPlace), name="session_place"
            ),
            models.CheckConstraint(
                condition=Q(place="account", lobby__isnull=True)
                | Q(place="lobby", lobby__isnull=False),
                name="session_lobby_matches_place",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.place} session {self.pk}"

    @classmethod
    def open(cls, account: Account, lobby: Lobby | None, now: datetime, lifetime: timedelta) -> str:
        """Store a new session, on the account area or (with `lobby`) on that lobby's host,
        and return its cookie token: the one time it exists outside the browser."""
        token, token_hash = new_secret()
        cls.objects.create(
            token_hash=token_hash,
            place=SessionPlace.ACCOUNT if lobby is None else SessionPlace.LOBBY,
            account=account,
            lobby=lobby,
            created_at=now,
            expires_at=now + lifetime,
        )
        return token


class Handoff(models.Model):
    """A one-minute, single-use pass from the account area to one lobby's host.

    Stored under SHA-256(token + verifier hash): only the browser whose lobby-host cookie
    holds the verifier can consume it.
    """

    key_hash = models.CharField(max_length=64, unique=True)
    account = models.ForeignKey(Account, on_delete=models.CASCADE, related_name="handoffs")
    lobby = models.ForeignKey(Lobby, on_delete=models.CASCADE, related_name="handoffs")
    to_settings = models.BooleanField(default=False)
    created_at = models.DateTimeField()
    expires_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"hand-off {self.pk}"
