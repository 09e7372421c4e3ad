"""The path from this machine to the broker: the configuration file, the broker at its URL,
the token. Each check answers Findings; `pocolobby.doctor` runs them in order."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import httpx

from lobbies.wire.errors import ErrorCode
from pocolobby.bridge.config import (
    AgentConfig,
    ConfigError,
    loosely_protected,
    plain_http_refusal,
    read_config,
)

Level = Literal["ok", "warn", "fail", "skip"]


@dataclass(frozen=True)
class Finding:
    """One check's outcome: a line, and for a failure or a warning the fix."""

    level: Level
    subject: str
    text: str
    fix: str = ""


Environ = Mapping[str, str]


def resolved(raw: str | Path) -> Path:
    return Path(raw).expanduser().resolve()


# ---------------------------------------------------------------- 1. the configuration file


def check_config(path: Path) -> tuple[AgentConfig | None, Finding]:
    try:
        config = read_config(path)
    except ConfigError as exc:
        return None, Finding(
            "fail",
            "config",
            str(exc),
            "use the file `pocolobby agent add --config` (or `agent rotate`) wrote, unchanged",
        )
    who = f"{config.agent} in lobby {config.lobby}"
    if loosely_protected(config.path):
        mode = config.path.stat().st_mode & 0o777
        return config, Finding(
            "fail",
            "config",
            f"{config.path} ({who}) holds the agent's token and other users may read it "
            f"(mode {mode:04o})",
            f"chmod 600 {shlex.quote(str(config.path))}",
        )
    return config, Finding("ok", "config", f"{config.path}: {who}, mode 0600")


# ---------------------------------------------------------------- 2. the broker


def _not_reached(url: str, exc: httpx.HTTPError, config: AgentConfig) -> Finding:
    detail = f"{type(exc).__name__}: {exc}".rstrip(": ")
    if "CERTIFICATE_VERIFY_FAILED" in str(exc) or "SSL" in str(exc):
        return Finding(
            "fail",
            "broker",
            f"{url}: the TLS connection failed ({detail})",
            "the broker's certificate must be valid for its name and trusted here: check the "
            "proxy's certificate, or add its CA to this machine's trust store (SSL_CERT_FILE)",
        )
    if isinstance(exc, httpx.TimeoutException):
        return Finding(
            "fail",
            "broker",
            f"{url} did not answer in time ({detail})",
            "check the network and the proxy in front of the broker",
        )
    return Finding(
        "fail",
        "broker",
        f"the broker was not reached at {url} ({detail})",
        "start it (`pocolobby serve` on its machine), or correct url in "
        f"{config.path}; a remote broker: check the proxy and the network",
    )


def check_broker(config: AgentConfig, client: httpx.Client) -> Finding:
    refusal = plain_http_refusal(config.url)
    if refusal is not None:
        return Finding("fail", "broker", refusal, f"edit url in {config.path}")
    try:
        response = client.get("/v1/health")
    except httpx.HTTPError as exc:
        return _not_reached(config.url, exc, config)
    try:
        payload = response.json()
    except ValueError:
        payload = None
    if not isinstance(payload, dict) or payload.get("service") != "pocolobby":
        return Finding(
            "fail",
            "broker",
            f"{config.url} answers (HTTP {response.status_code}), but not as a PocoLobby broker",
            f"url in {config.path} must be the broker's address (POCOLOBBY_URL when the agent "
            "was added)",
        )
    if not response.is_success:
        error = payload.get("error")
        message = error.get("message") if isinstance(error, dict) else None
        return Finding(
            "fail",
            "broker",
            f"{config.url} answers, but its store does not ({message or response.status_code})",
            "the broker's operator looks at its log",
        )
    if payload.get("restore_mode"):
        return Finding(
            "fail",
            "broker",
            f"{config.url} is in restore mode: agents are refused until the restore is finished",
            "the operator runs `pocolobby restore --finish` on the broker's machine",
        )
    how = "TLS" if config.url.startswith("https://") else "plain http on this machine"
    return Finding("ok", "broker", f"{config.url} answers ({how})")


# ---------------------------------------------------------------- 3. the token


def check_token(config: AgentConfig, client: httpx.Client) -> list[Finding]:
    """`GET /v1/me`: no runtime headers, so nothing is claimed."""
    try:
        response = client.get("/v1/me", headers={"Authorization": f"Bearer {config.token}"})
    except httpx.HTTPError as exc:
        return [_not_reached(config.url, exc, config)]
    try:
        payload = response.json()
    except ValueError:
        payload = None
    payload = payload if isinstance(payload, dict) else {}
    target = f"{shlex.quote(config.lobby)} {shlex.quote(config.agent)}"
    if not response.is_success:
        error = payload.get("error")
        error = error if isinstance(error, dict) else {}
        code = str(error.get("code") or f"http_{response.status_code}")
        said = f"{response.status_code} {code}: {error.get('message') or response.reason_phrase}"
        fixes: dict[str, str] = {
            ErrorCode.INVALID_TOKEN: "the token is not one of this broker's: the owner runs "
            f"`pocolobby agent rotate {target} --config FILE` and sends you the new file",
            ErrorCode.TOKEN_REVOKED: "the token was rotated: use the newest configuration the "
            f"owner wrote (`pocolobby agent rotate {target} --config FILE`)",
            ErrorCode.AGENT_DISABLED: f"the owner enables it: pocolobby agent enable {target}",
            ErrorCode.RESTORE_MODE: "the operator finishes the restore: pocolobby restore --finish",
        }
        fix = fixes.get(code)
        if fix is None and response.status_code in (404, 405):
            fix = "this broker is older than GET /v1/me: update PocoLobby on the broker's machine"
        return [
            Finding("fail", "token", f"the broker refused the token ({said})", fix or ""),
        ]
    lobby, agent = str(payload.get("lobby", "")), str(payload.get("agent_id", ""))
    if (lobby, agent) != (config.lobby, config.agent):
        return [
            Finding(
                "fail",
                "token",
                f"the token is {agent} in lobby {lobby}'s, but {config.path} names "
                f"{config.agent} in lobby {config.lobby}",
                "use the file the broker wrote for this agent, unchanged",
            )
        ]
    held = "; a session holds the agent now" if payload.get("connected") else ""
    findings = [Finding("ok", "token", f"accepted: {agent} in lobby {lobby}, enabled{held}")]
    if payload.get("delivery_paused"):
        findings.append(
            Finding(
                "fail",
                "lobby",
                f"{lobby}'s delivery is paused: messages queue, nothing is pushed",
                f"the owner resumes it: pocolobby lobby resume {shlex.quote(lobby)}",
            )
        )
    else:
        findings.append(Finding("ok", "lobby", f"{lobby}'s delivery is not paused"))
    if payload.get("resting"):
        findings.append(
            Finding(
                "warn",
                "agent",
                f"{agent} is resting: nothing is pushed to it until it is resumed",
                f"the owner resumes it: pocolobby agent resume {target}",
            )
        )
    return findings
