"""The agent configuration file and the runtime id derived from the host's conversation.

The runtime id is HMAC-SHA256 keyed by the agent token over `CLAUDE_CODE_SESSION_ID`, so a
resumed conversation presents the same id (and reclaims its binding without the owner), a new
conversation presents another one, a rotated token starts a new runtime, and the broker never
sees the local session id.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import os
import stat
import uuid
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from lobbies.wire.jsontext import PARSE_DEPTH, load_json
from pocolobby.bridge.files import FileIdentity

SESSION_VARIABLE = "CLAUDE_CODE_SESSION_ID"


class ConfigError(Exception):
    """The configuration file is missing or not an agent configuration; says which."""


@dataclass(frozen=True)
class AgentConfig:
    """What `pocolobby agent add` wrote: where the broker is and who this agent is."""

    path: Path
    url: str
    token: str
    lobby: str
    agent: str
    # The file as the kernel knows it (resolved path, device, inode): the attachment rules
    # never read it, nor a link or a hard link of it.
    identity: FileIdentity | None = None

    def __repr__(self) -> str:  # never print the token by accident
        return f"AgentConfig(path={self.path!s}, url={self.url}, {self.lobby}/{self.agent})"


def load_config(raw_path: str | Path) -> AgentConfig:
    """Read and check `{"url", "token", "lobby", "agent"}`; ConfigError names what is wrong,
    a plain http url to another machine included."""
    config = read_config(raw_path)
    refusal = plain_http_refusal(config.url)
    if refusal is not None:
        raise ConfigError(f"{config.path}: {refusal}")
    return config


def read_config(raw_path: str | Path) -> AgentConfig:
    """`load_config` without the plain-http rule, for a check that reports that rule itself."""
    path = Path(raw_path).expanduser().resolve()
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"no agent configuration at {path}") from None
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        data = load_json(text, PARSE_DEPTH)
    except ValueError:
        raise ConfigError(f"{path} is not JSON") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path} is not a JSON object")
    values: dict[str, str] = {}
    for key in ("url", "token", "lobby", "agent"):
        value = data.get(key)
        if not isinstance(value, str) or not value.strip():
            raise ConfigError(f"{path} has no string {key!r}: is it an agent configuration?")
        values[key] = value.strip()
    if not values["url"].startswith(("http://", "https://")):
        raise ConfigError(f"{path}: url must start with http:// or https://")
    return AgentConfig(
        path,
        values["url"].rstrip("/"),
        values["token"],
        values["lobby"],
        values["agent"],
        FileIdentity.of(path),
    )


def plain_http_refusal(url: str) -> str | None:
    """Why the bridge refuses `url`, or None: plain http is for this machine only."""
    if not url.startswith("http://") or is_loopback(url):
        return None
    return (
        f"url {url} is plain http to another machine, which would send the agent's token and "
        "every message unencrypted. Use the broker's https:// address, or reach it through an "
        "SSH tunnel (ssh -N -L 8787:127.0.0.1:8787 HOST, then url http://127.0.0.1:8787)."
    )


def is_loopback(url: str) -> bool:
    """True when the URL's host is this machine: localhost or a loopback address."""
    try:
        host = urlsplit(url).hostname or ""
    except ValueError:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def loosely_protected(path: Path) -> bool:
    """True when group or others may read the file that holds the token."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return False
    return bool(mode & (stat.S_IRWXG | stat.S_IRWXO))


def derive_runtime_id(token: str, session_id: str) -> str:
    """HMAC-SHA256(token, session id) as a lowercase RFC 9562 version-8 UUID."""
    digest = bytearray(
        hmac.new(token.encode("utf-8"), session_id.encode("utf-8"), hashlib.sha256).digest()[:16]
    )
    digest[6] = (digest[6] & 0x0F) | 0x80  # version 8: custom
    digest[8] = (digest[8] & 0x3F) | 0x80  # variant 10 (RFC 9562)
    return str(uuid.UUID(bytes=bytes(digest)))


@dataclass(frozen=True)
class Runtime:
    """The runtime this process presents, and whether it outlives the process."""

    runtime_id: str
    scope: str  # "conversation" (derived from the host) or "process" (random)


def runtime_for(token: str, environ: dict[str, str] | None = None) -> Runtime:
    """The conversation-derived runtime, or a random one per process without a session id."""
    env = os.environ if environ is None else environ
    session_id = (env.get(SESSION_VARIABLE) or "").strip()
    if session_id:
        return Runtime(derive_runtime_id(token, session_id), "conversation")
    return Runtime(str(uuid.uuid4()), "process")
