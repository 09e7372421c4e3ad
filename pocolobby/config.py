"""Where the broker keeps its files and which limits it enforces, from the environment only."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from ipaddress import IPv4Network, IPv6Network, ip_network
from pathlib import Path
from urllib.parse import urlsplit

import platformdirs

from lobbies.wire.frames import MAX_PUSH_CONTENT_BYTES, MAX_PUSH_FRAME_BYTES
from lobbies.wire.media import DEFAULT_DOCUMENT_BYTES, DEFAULT_IMAGE_BYTES

DEFAULT_PORT = 8787
DEFAULT_URL = f"http://127.0.0.1:{DEFAULT_PORT}"


def data_dir() -> Path:
    """The data directory: POCOLOBBY_DATA_DIR, else the per-user data directory."""
    configured = os.environ.get("POCOLOBBY_DATA_DIR")
    path = Path(configured) if configured else Path(platformdirs.user_data_dir("pocolobby"))
    return path.expanduser().resolve()


def attachments_dir(data: Path) -> Path:
    """Where attachment files live: POCOLOBBY_ATTACHMENTS_DIR, else `attachments` in `data`.
    One rule for the broker, backup and restore, so a moved directory is backed up too."""
    configured = os.environ.get("POCOLOBBY_ATTACHMENTS_DIR")
    return Path(configured).expanduser() if configured else data / "attachments"


def _int_env(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw)
    except ValueError as exc:
        raise SystemExit(f"{name} must be an integer, got {raw!r}") from exc
    if value <= 0:
        raise SystemExit(f"{name} must be positive, got {value}")
    return value


def _at_most(name: str, value: int, ceiling: int, why: str) -> int:
    if value > ceiling:
        raise SystemExit(f"{name} must be at most {ceiling} ({why}), got {value}")
    return value


def _seconds_list_env(name: str, default: tuple[float, ...]) -> tuple[float, ...]:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        values = tuple(float(part) for part in raw.split(","))
    except ValueError as exc:
        raise SystemExit(f"{name} must be comma-separated seconds, got {raw!r}") from exc
    if not values or any(v <= 0 for v in values):
        raise SystemExit(f"{name} must list positive seconds, got {raw!r}")
    return values


@dataclass(frozen=True)
class Bounds:
    """Default bounds; each can be tuned with the environment variable of the same name."""

    content_bytes: int = 64 * 1024
    request_bytes: int = 256 * 1024
    sends_per_minute: int = 120
    queued_messages_per_recipient: int = 1000
    queued_bytes_per_recipient: int = 16 * 1024 * 1024
    push_bytes: int = 32 * 1024
    checkpoint_bytes: int = 32 * 1024
    # A scheduled message delivered later than this after its time says it is late.
    late_after_seconds: int = 60
    push_batch_ms: int = 10
    # Delays before each retry of an unresolved notification; its length is the budget.
    notify_retry_seconds: tuple[float, ...] = (30, 60, 120, 300, 300)
    receipt_wait_seconds: float = 2
    receipt_spacing_seconds: float = 30
    receipts_per_event: int = 20
    # An agent shows working this long after its turn ended (a pause between turns is work).
    working_after_turn_seconds: int = 120
    # Capacity guards (issue 16): refused before anything is stored.
    disk_reserve_bytes: int = 256 * 1024 * 1024
    lobby_messages: int = 500_000
    broadcast_fanout: int = 100
    # Rooms per lobby (live ones; archived rooms do not count): the settings page lists them.
    lobby_rooms: int = 200
    # Attachments (issue 14): per file, per lobby, the disk they leave free, upload memory.
    attachment_image_bytes: int = DEFAULT_IMAGE_BYTES  # the bridge's too (lobbies/wire/media.py)
    attachment_document_bytes: int = DEFAULT_DOCUMENT_BYTES
    attachments_lobby_bytes: int = 1024 * 1024 * 1024
    attachments_reserve_bytes: int = 1024 * 1024 * 1024
    upload_memory_bytes: int = 64 * 1024 * 1024
    # Uploads no stored send named yet are removed after this.
    upload_grace_seconds: int = 15 * 60
    # Message notices pushed to one agent per minute; the excess waits and goes as one.
    notices_per_minute: int = 60

    # A connection's request headers must all arrive within this (lobbies/fastlane/server.py), and
    # be at most this large (431 past it).
    header_seconds: int = 10
    header_bytes: int = 64 * 1024
    # A request body may pause this long, and take this long in all (408 past either).
    body_stall_seconds: int = 30
    body_seconds: int = 300

    @classmethod
    def from_env(cls) -> Bounds:
        return cls(
            content_bytes=_int_env("POCOLOBBY_CONTENT_BYTES", cls.content_bytes),
            request_bytes=_int_env("POCOLOBBY_REQUEST_BYTES", cls.request_bytes),
            sends_per_minute=_int_env("POCOLOBBY_SENDS_PER_MINUTE", cls.sends_per_minute),
            queued_messages_per_recipient=_int_env(
                "POCOLOBBY_QUEUED_MESSAGES", cls.queued_messages_per_recipient
            ),
            queued_bytes_per_recipient=_int_env(
                "POCOLOBBY_QUEUED_BYTES", cls.queued_bytes_per_recipient
            ),
            push_bytes=_at_most(
                "POCOLOBBY_PUSH_BYTES",
                _int_env("POCOLOBBY_PUSH_BYTES", cls.push_bytes),
                MAX_PUSH_CONTENT_BYTES,
                f"a bridge takes pushes of {MAX_PUSH_FRAME_BYTES} bytes at most",
            ),
            checkpoint_bytes=_int_env("POCOLOBBY_CHECKPOINT_BYTES", cls.checkpoint_bytes),
            late_after_seconds=_int_env("POCOLOBBY_LATE_AFTER_SECONDS", cls.late_after_seconds),
            push_batch_ms=_int_env("POCOLOBBY_PUSH_BATCH_MS", cls.push_batch_ms),
            disk_reserve_bytes=_int_env("POCOLOBBY_DISK_RESERVE_BYTES", cls.disk_reserve_bytes),
            lobby_messages=_int_env("POCOLOBBY_LOBBY_MESSAGES", cls.lobby_messages),
            broadcast_fanout=_int_env("POCOLOBBY_BROADCAST_FANOUT", cls.broadcast_fanout),
            lobby_rooms=_int_env("POCOLOBBY_LOBBY_ROOMS", cls.lobby_rooms),
            attachment_image_bytes=_int_env(
                "POCOLOBBY_ATTACHMENT_IMAGE_BYTES", cls.attachment_image_bytes
            ),
            attachment_document_bytes=_int_env(
                "POCOLOBBY_ATTACHMENT_DOCUMENT_BYTES", cls.attachment_document_bytes
            ),
            attachments_lobby_bytes=_int_env(
                "POCOLOBBY_ATTACHMENTS_LOBBY_BYTES", cls.attachments_lobby_bytes
            ),
            attachments_reserve_bytes=_int_env(
                "POCOLOBBY_ATTACHMENTS_RESERVE_BYTES", cls.attachments_reserve_bytes
            ),
            upload_memory_bytes=_int_env("POCOLOBBY_UPLOAD_MEMORY_BYTES", cls.upload_memory_bytes),
            upload_grace_seconds=_int_env(
                "POCOLOBBY_UPLOAD_GRACE_SECONDS", cls.upload_grace_seconds
            ),
            notices_per_minute=_int_env("POCOLOBBY_NOTICES_PER_MINUTE", cls.notices_per_minute),
            working_after_turn_seconds=_int_env(
                "POCOLOBBY_WORKING_AFTER_TURN_SECONDS", cls.working_after_turn_seconds
            ),
            receipt_spacing_seconds=_int_env(
                "POCOLOBBY_RECEIPT_SPACING_SECONDS", int(cls.receipt_spacing_seconds)
            ),
            header_seconds=_int_env("POCOLOBBY_HEADER_SECONDS", cls.header_seconds),
            header_bytes=_int_env("POCOLOBBY_HEADER_BYTES", cls.header_bytes),
            body_stall_seconds=_int_env("POCOLOBBY_BODY_STALL_SECONDS", cls.body_stall_seconds),
            body_seconds=_int_env("POCOLOBBY_BODY_SECONDS", cls.body_seconds),
            notify_retry_seconds=_seconds_list_env(
                "POCOLOBBY_NOTIFY_RETRY_SECONDS", cls.notify_retry_seconds
            ),
        )


# A DNS name: dot-separated labels of letters, digits and inner hyphens (no `*`, no `_`).
_HOST_LABEL = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$")
LOOPBACK_PROXIES = ("127.0.0.1", "::1")


def parse_public_origin(raw: str) -> str:
    """The public https origin of a one-host broker behind a tunnel or proxy, normalised
    (`https://name` or `https://name:port`, lowercase, no slash), or ValueError saying what
    is wrong with it: another scheme, a path, a wildcard, a user, an address."""
    text = raw.strip()
    parts = urlsplit(text)
    if parts.scheme.lower() != "https":
        raise ValueError(
            f"must be an https origin such as https://laptop.example.ts.net, got {text!r}: "
            "phones sign in and take notifications only on https"
        )
    if parts.path not in ("", "/") or parts.query or parts.fragment or text.endswith("?"):
        raise ValueError(
            f"must be an origin without a path, query or fragment, got {text!r}: lobbies "
            "live under paths of it (https://NAME/<lobby>/)"
        )
    if "@" in parts.netloc:
        raise ValueError(f"must not carry a user name or password, got {text!r}")
    host = (parts.hostname or "").rstrip(".")
    if "*" in parts.netloc:
        raise ValueError(
            f"must name one host, not a wildcard, got {text!r}: a one-host broker serves "
            "its lobbies under paths (POCOLOBBY_DOMAIN is the wildcard layout)"
        )
    try:
        port = parts.port
    except ValueError:
        raise ValueError(f"has a port that is not a number from 1 to 65535: {text!r}") from None
    labels = host.split(".")
    if len(labels) < 2 or not all(_HOST_LABEL.match(label) for label in labels):
        raise ValueError(
            f"must name a host by its DNS name (letters, digits, hyphens, dots), got {text!r}"
        )
    if labels[-1].isdigit():
        raise ValueError(
            f"must name a host by its DNS name, not an address, got {text!r}: certificates "
            "and phones need the name"
        )
    return f"https://{host}" + (f":{port}" if port and port != 443 else "")


def parse_trusted_proxies(raw: str) -> tuple[IPv4Network | IPv6Network, ...]:
    """The addresses (or networks) a proxy in front of a one-host broker connects from,
    comma-separated; ValueError naming an entry that is neither."""
    networks: list[IPv4Network | IPv6Network] = []
    for item in (part.strip() for part in raw.split(",")):
        if not item:
            continue
        try:
            networks.append(ip_network(item, strict=False))
        except ValueError:
            raise ValueError(
                f"must list IP addresses or networks (such as 127.0.0.1 or 10.0.0.0/24), "
                f"got {item!r}"
            ) from None
    if not networks:
        raise ValueError("must name at least one address")
    return tuple(networks)


def public_origin_from_env() -> str:
    """POCOLOBBY_PUBLIC_ORIGIN, checked ("" when unset); a wrong one stops the broker."""
    raw = os.environ.get("POCOLOBBY_PUBLIC_ORIGIN", "")
    if not raw.strip():
        return ""
    if os.environ.get("POCOLOBBY_DOMAIN", "").strip():
        raise SystemExit(
            "POCOLOBBY_PUBLIC_ORIGIN and POCOLOBBY_DOMAIN are two layouts: set one "
            "(POCOLOBBY_PUBLIC_ORIGIN for one person's broker behind a tunnel, "
            "POCOLOBBY_DOMAIN for hosted lobbies on their own host names)"
        )
    try:
        return parse_public_origin(raw)
    except ValueError as error:
        raise SystemExit(f"POCOLOBBY_PUBLIC_ORIGIN {error}") from None


def trusted_proxies_from_env() -> tuple[IPv4Network | IPv6Network, ...]:
    """POCOLOBBY_TRUSTED_PROXIES: this machine's loopback addresses unless set."""
    raw = os.environ.get("POCOLOBBY_TRUSTED_PROXIES", "")
    try:
        return parse_trusted_proxies(raw if raw.strip() else ",".join(LOOPBACK_PROXIES))
    except ValueError as error:
        raise SystemExit(f"POCOLOBBY_TRUSTED_PROXIES {error}") from None
