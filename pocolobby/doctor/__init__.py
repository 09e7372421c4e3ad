"""`pocolobby doctor`: check an agent's whole path, in order, one line per check with its fix.

1. the configuration file: found, an agent configuration, readable by its user only;
2. the broker at its URL, under the bridge's own rule (plain http only to this machine);
3. the token, through `GET /v1/me`: accepted, the agent enabled, the lobby's delivery not
   paused. That read sends no runtime headers, so it claims nothing and never disturbs the
   session that holds the agent;
4. the host setup in a project directory: the MCP entries `pocolobby connect` writes (Claude
   Code, Codex CLI, Gemini CLI) run the bridge with this configuration, Claude Code's status
   line and hooks report for it, and the host program is on PATH (Claude Code new enough for
   channels).

A check that cannot run because an earlier one failed says so. Imports no Django: it runs on
an agent's machine, where only the bridge's packages are installed.
"""

from __future__ import annotations

from pathlib import Path

import httpx

from pocolobby.bridge import bridge_version
from pocolobby.doctor.checks import (
    Environ,
    Finding,
    Level,
    check_broker,
    check_config,
    check_token,
)
from pocolobby.doctor.hosts import check_hosts, locate_config

MARKS: dict[Level, str] = {"ok": "ok  ", "warn": "warn", "fail": "FAIL", "skip": "--  "}
TIMEOUT = httpx.Timeout(10.0, connect=5.0)


def diagnose(given: str | None, directory: Path, environ: Environ) -> list[Finding]:
    """Every check, in order; a check whose ground an earlier failure took says so."""
    directory = directory.expanduser().resolve()
    path, missing = locate_config(given, directory, environ)
    if path is None:
        assert missing is not None
        return [
            missing,
            Finding("skip", "broker", "not checked: no configuration"),
            Finding("skip", "token", "not checked: no configuration"),
            Finding("skip", "host", "not checked: no configuration"),
        ]
    config, found = check_config(path)
    findings = [found]
    if config is None:
        findings += [
            Finding("skip", "broker", "not checked: the configuration is not usable"),
            Finding("skip", "token", "not checked: the configuration is not usable"),
        ]
    else:
        with httpx.Client(
            base_url=config.url,
            timeout=TIMEOUT,
            headers={"User-Agent": f"pocolobby-doctor/{bridge_version()}"},
        ) as client:
            broker = check_broker(config, client)
            findings.append(broker)
            if broker.level == "ok":
                findings += check_token(config, client)
            else:
                findings.append(Finding("skip", "token", "not checked: the broker check failed"))
    return findings + check_hosts(path, directory, environ)


def report(findings: list[Finding]) -> tuple[list[str], int]:
    """The lines to print (what others wrote shown terminal-safe by the caller) and the exit
    status: 1 when any check failed."""
    lines = []
    for finding in findings:
        lines.append(f"{MARKS[finding.level]} {finding.subject}: {finding.text}")
        if finding.fix and finding.level in ("fail", "warn"):
            lines.append(f"     fix: {finding.fix}")
    failed = sum(1 for f in findings if f.level == "fail")
    if failed:
        lines.append(
            f"{failed} check{'s' if failed > 1 else ''} failed: fix the first, then run "
            "`pocolobby doctor` again"
        )
    else:
        warned = sum(1 for f in findings if f.level == "warn")
        lines.append(
            "every check passed"
            + (f" ({warned} warning{'s' if warned > 1 else ''})" if warned else "")
        )
    return lines, 1 if failed else 0
