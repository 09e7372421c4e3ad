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

import os
import re
import shlex
import shutil
import subprocess
import tomllib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import httpx

from lobbies.wire import PARSE_DEPTH, load_json
from pocolobby.bridge import bridge_version
from pocolobby.bridge.config import (
    AgentConfig,
    ConfigError,
    loosely_protected,
    plain_http_refusal,
    read_config,
)
from pocolobby.bridge.connect import HOSTS, codex_config_path

Level = Literal["ok", "warn", "fail", "skip"]
MARKS: dict[Level, str] = {"ok": "ok  ", "warn": "warn", "fail": "FAIL", "skip": "--  "}

TIMEOUT = httpx.Timeout(10.0, connect=5.0)
# Claude Code's first release with channels (`--dangerously-load-development-channels`).
CLAUDE_CHANNELS = (2, 1, 80)
PROGRAMS = {"claude": "claude", "codex": "codex", "gemini": "gemini"}
PACKAGES = {
    "claude": "@anthropic-ai/claude-code",
    "codex": "@openai/codex",
    "gemini": "@google/gemini-cli",
}
CLAUDE_HOOKS = ("UserPromptSubmit", "Stop")


@dataclass(frozen=True)
class Finding:
    """One check's outcome: a line, and for a failure or a warning the fix."""

    level: Level
    subject: str
    text: str
    fix: str = ""


Environ = Mapping[str, str]


def _resolved(raw: str | Path) -> Path:
    return Path(raw).expanduser().resolve()


# ---------------------------------------------------------------- the host entries


@dataclass(frozen=True)
class HostEntry:
    """An MCP server entry that runs `pocolobby bridge`, where a host reads it."""

    host: str  # a key of connect's HOSTS
    where: str  # the file, and for ~/.claude.json the scope in it
    name: str
    command: str
    args: tuple[str, ...]

    @property
    def config(self) -> Path | None:
        """The configuration the entry hands the bridge (`--config F`)."""
        args = list(self.args)
        if "bridge" not in args:
            return None
        rest = args[args.index("bridge") + 1 :]
        for i, arg in enumerate(rest):
            if arg == "--config" and i + 1 < len(rest):
                return _resolved(rest[i + 1])
            if arg.startswith("--config="):
                return _resolved(arg.removeprefix("--config="))
        return None

    @property
    def deliver(self) -> str:
        args = list(self.args)
        return "tmux" if "tmux" in args and "--deliver" in args else "channel"

    def command_found(self) -> bool:
        path = Path(self.command).expanduser()
        if path.is_absolute():
            return path.is_file() and os.access(path, os.X_OK)
        return shutil.which(self.command) is not None


class Unreadable(Exception):
    """A host's file this check cannot read; says which and why."""


def _parsed(path: Path, parse: Callable[[str], object], kind: str) -> dict[str, Any] | None:
    """The file's object, None when the file is absent; Unreadable when it is not one."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise Unreadable(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        data = parse(text) if text.strip() else {}
    except (ValueError, tomllib.TOMLDecodeError):
        raise Unreadable(f"{path} is not valid {kind}") from None
    if not isinstance(data, dict):
        raise Unreadable(f"{path} is not a {kind} object")
    return data


def _json_object(path: Path) -> dict[str, Any] | None:
    return _parsed(path, lambda text: load_json(text, PARSE_DEPTH), "JSON")


def _toml_table(path: Path) -> dict[str, Any] | None:
    return _parsed(path, tomllib.loads, "TOML")


def _entries_in(host: str, where: str, servers: object) -> Iterator[HostEntry]:
    if not isinstance(servers, dict):
        return
    for name, entry in servers.items():
        if not isinstance(entry, dict):
            continue
        command, args = entry.get("command"), entry.get("args", [])
        if not isinstance(command, str) or not isinstance(args, list):
            continue
        found = HostEntry(host, where, str(name), command, tuple(str(a) for a in args))
        if found.config is not None:
            yield found


def claude_home(environ: Environ) -> Path:
    """Where Claude Code keeps a person's files: $CLAUDE_CONFIG_DIR, else ~/.claude."""
    configured = environ.get("CLAUDE_CONFIG_DIR")
    return Path(configured).expanduser() if configured else _home(environ) / ".claude"


def claude_state_file(environ: Environ) -> Path:
    """Claude Code's own state (local- and user-scope MCP servers, project approvals)."""
    configured = environ.get("CLAUDE_CONFIG_DIR")
    return (Path(configured).expanduser() if configured else _home(environ)) / ".claude.json"


def _home(environ: Environ) -> Path:
    return Path(environ.get("HOME") or Path.home())


def _claude_project(state: dict[str, Any] | None, directory: Path) -> dict[str, Any]:
    projects = (state or {}).get("projects")
    project = projects.get(str(directory)) if isinstance(projects, dict) else None
    return project if isinstance(project, dict) else {}


def host_entries(directory: Path, environ: Environ) -> tuple[list[HostEntry], list[str]]:
    """Every bridge entry the hosts would read in `directory`, and the files that could not
    be read (each a sentence)."""
    entries: list[HostEntry] = []
    problems: list[str] = []

    def read(reader: Callable[[Path], dict[str, Any] | None], path: Path) -> dict[str, Any]:
        try:
            return reader(path) or {}
        except Unreadable as exc:
            problems.append(str(exc))
            return {}

    mcp_json = directory / ".mcp.json"
    entries += _entries_in("claude", str(mcp_json), read(_json_object, mcp_json).get("mcpServers"))
    state_path = claude_state_file(environ)
    state = read(_json_object, state_path)
    project = _claude_project(state, directory)
    entries += _entries_in("claude", f"{state_path} (local scope)", project.get("mcpServers"))
    entries += _entries_in("claude", f"{state_path} (user scope)", state.get("mcpServers"))
    for codex in dict.fromkeys(
        (directory / ".codex" / "config.toml", codex_config_path(dict(environ)))
    ):
        entries += _entries_in("codex", str(codex), read(_toml_table, codex).get("mcp_servers"))
    for gemini in (
        directory / ".gemini" / "settings.json",
        _home(environ) / ".gemini" / "settings.json",
    ):
        entries += _entries_in("gemini", str(gemini), read(_json_object, gemini).get("mcpServers"))
    return entries, problems


# ---------------------------------------------------------------- 1. the configuration file


def locate_config(
    given: str | None, directory: Path, environ: Environ
) -> tuple[Path | None, Finding | None]:
    """--config, else $POCOLOBBY_CONFIG, else the one configuration the directory's host
    entries run the bridge with; a failure when none (or several) is found."""
    if given:
        return _resolved(given), None
    if environ.get("POCOLOBBY_CONFIG"):
        return _resolved(environ["POCOLOBBY_CONFIG"]), None
    entries, _ = host_entries(directory, environ)
    found = list(dict.fromkeys(e.config for e in entries if e.config is not None))
    if len(found) == 1:
        return found[0], None
    if found:
        listed = ", ".join(str(p) for p in found)
        return None, Finding(
            "fail",
            "config",
            f"the hosts in {directory} run the bridge with several configurations ({listed})",
            "name the one to check: pocolobby doctor --config FILE",
        )
    return None, Finding(
        "fail",
        "config",
        f"no agent configuration: no --config, no $POCOLOBBY_CONFIG, and no host in "
        f"{directory} runs the bridge",
        "pocolobby doctor --config FILE (the file `pocolobby agent add` wrote), or run doctor "
        "in the project you connected",
    )


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
        fixes = {
            "invalid_token": "the token is not one of this broker's: the owner runs `pocolobby "
            f"agent rotate {target} --config FILE` and sends you the new file",
            "token_revoked": "the token was rotated: use the newest configuration the owner "
            f"wrote (`pocolobby agent rotate {target} --config FILE`)",
            "agent_disabled": f"the owner enables it: pocolobby agent enable {target}",
            "restore_mode": "the operator finishes the restore: pocolobby restore --finish",
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


# ---------------------------------------------------------------- 4. the host setup


def _connect_fix(config: Path, directory: Path, host: str = "") -> str:
    flag = f" --host {host}" if host else ""
    return f"in {directory}: pocolobby connect --config {shlex.quote(str(config))}{flag}" + (
        "" if host else " (add --host codex or --host gemini for those hosts)"
    )


def check_hosts(config: Path, directory: Path, environ: Environ) -> list[Finding]:
    entries, problems = host_entries(directory, environ)
    findings = [
        Finding("fail", "host", problem, "fix or move that file, then connect again")
        for problem in problems
    ]
    mine = [e for e in entries if e.config == config]
    if not mine:
        elsewhere = "; ".join(f"{e.name} in {e.where} runs {e.config}" for e in entries)
        text = f"no host in {directory} runs the bridge with {config}" + (
            f" ({elsewhere})" if elsewhere else ": nothing is set up here"
        )
        return [*findings, Finding("fail", "host", text, _connect_fix(config, directory))]
    for entry in mine:
        label = f"{HOSTS[entry.host]}: {entry.name} in {entry.where}"
        if entry.command_found():
            findings.append(Finding("ok", entry.host, f"{label} runs the bridge with it"))
        else:
            findings.append(
                Finding(
                    "fail",
                    entry.host,
                    f"{label} runs {entry.command}, which is not there (PocoLobby moved?)",
                    _connect_fix(config, directory, entry.host),
                )
            )
    claude = [e for e in mine if e.host == "claude"]
    for entry in claude:
        if entry.where == str(directory / ".mcp.json"):
            findings += _approval(entry, directory, environ)
    if claude:
        findings += _claude_reports(config, directory, environ)
    for host in dict.fromkeys(e.host for e in mine):
        channels = any(e.deliver == "channel" for e in mine if e.host == host)
        findings.append(_program(host, channels and host == "claude"))
    if any(e.deliver == "tmux" for e in mine):
        findings.append(
            _on_path("tmux", "tmux", "install tmux (apt install tmux, brew install tmux)")
        )
    return findings


def _on_path(subject: str, program: str, fix: str) -> Finding:
    found = shutil.which(program)
    if found is None:
        return Finding("fail", subject, f"{program} is not on PATH", fix)
    return Finding("ok", subject, f"{program} on PATH ({found})")


def claude_version(program: str) -> tuple[int, ...] | None:
    """`claude --version`'s x.y.z, or None when it does not say."""
    try:
        done = subprocess.run(
            [program, "--version"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    match = re.search(r"(\d+)\.(\d+)\.(\d+)", done.stdout)
    return tuple(int(part) for part in match.groups()) if match else None


def _program(host: str, channels: bool) -> Finding:
    install = f"install {HOSTS[host]}: npm install -g {PACKAGES[host]}"
    found = _on_path(host, PROGRAMS[host], install)
    if found.level != "ok" or not channels:
        return found
    version = claude_version(PROGRAMS[host])
    if version is None:
        return Finding(
            "warn", host, f"{found.text}, but `claude --version` names no version", install
        )
    have, first = (".".join(str(p) for p in v) for v in (version, CLAUDE_CHANNELS))
    if version < CLAUDE_CHANNELS:
        return Finding(
            "fail",
            host,
            f"Claude Code {have} is older than {first}, the first with channels",
            "claude update (or npm install -g @anthropic-ai/claude-code)",
        )
    return Finding("ok", host, f"Claude Code {have} at {shutil.which(PROGRAMS[host])}")


def _settings_files(directory: Path, environ: Environ) -> list[Path]:
    """Claude Code's settings, the strongest first: the project's local, shared, the user's."""
    claude = directory / ".claude"
    return [
        claude / "settings.local.json",
        claude / "settings.json",
        claude_home(environ) / "settings.json",
    ]


def _settings(directory: Path, environ: Environ) -> list[tuple[Path, dict[str, Any]]]:
    found = []
    for path in _settings_files(directory, environ):
        try:
            data = _json_object(path)
        except Unreadable:
            continue  # Claude Code itself says so; the MCP entry's check does not need it
        if data is not None:
            found.append((path, data))
    return found


def _approval(entry: HostEntry, directory: Path, environ: Environ) -> list[Finding]:
    """A `.mcp.json` server runs only once approved (`claude mcp list`: pending approval)."""
    try:
        state = _json_object(claude_state_file(environ))
    except Unreadable:
        state = None
    project = _claude_project(state, directory)
    if entry.name in (project.get("disabledMcpjsonServers") or []):
        return [
            Finding(
                "fail",
                "claude",
                f"Claude Code was told not to run the project server {entry.name} here",
                f"in {directory}: claude mcp reset-project-choices, then approve it when "
                "claude starts",
            )
        ]
    every = [data.get("enableAllProjectMcpServers") for _, data in _settings(directory, environ)]
    approved = [*(project.get("enabledMcpjsonServers") or [])]
    for _, data in _settings(directory, environ):
        approved += data.get("enabledMcpjsonServers") or []
    if entry.name in approved or project.get("enableAllProjectMcpServers") or any(every):
        return []
    return [
        Finding(
            "warn",
            "claude",
            f"the project server {entry.name} is not approved yet (`claude mcp list` shows it "
            "pending approval)",
            f"start claude in {directory} and approve it when asked",
        )
    ]


def _reports_for(command: str, subcommand: str, config: Path, env: Environ) -> bool:
    """Whether a settings command runs `pocolobby SUBCOMMAND` for this configuration."""
    try:
        words = shlex.split(command)
    except ValueError:
        return False
    if subcommand not in words:
        return False
    rest = words[words.index(subcommand) + 1 :]
    for i, word in enumerate(rest):
        if word == "--config" and i + 1 < len(rest):
            return _resolved(rest[i + 1]) == config
        if word.startswith("--config="):
            return _resolved(word.removeprefix("--config=")) == config
    named = env.get("POCOLOBBY_CONFIG")
    return named is not None and _resolved(named) == config


def _claude_reports(config: Path, directory: Path, environ: Environ) -> list[Finding]:
    """The status line and the two hooks that feed the dashboard's plan usage, turns and
    tokens (docs/AGENTS.md, "Status line and hooks"): a warning when missing, since the
    agent's messages flow without them."""
    settings = _settings(directory, environ)
    env: dict[str, str] = dict(environ)
    for _, data in reversed(settings):  # the strongest file's env wins, as in Claude Code
        if isinstance(data.get("env"), dict):
            env.update({str(k): str(v) for k, v in data["env"].items()})
    fix = f"{_connect_fix(config, directory, 'claude')} (or docs/AGENTS.md, status line and hooks)"
    findings = []
    line = next((data["statusLine"] for _, data in settings if "statusLine" in data), None)
    command = line.get("command") if isinstance(line, dict) else None
    if isinstance(command, str) and _reports_for(command, "statusline", config, env):
        findings.append(Finding("ok", "claude", "the status line reports plan usage for it"))
    else:
        findings.append(
            Finding(
                "warn",
                "claude",
                "no status line reports this agent's plan usage (the dashboard's Plan usage "
                "stays empty)",
                fix,
            )
        )
    missing = [
        event
        for event in CLAUDE_HOOKS
        if not any(
            _reports_for(command, "hook", config, env)
            for _, data in settings
            for command in _hook_commands(data, event)
        )
    ]
    if missing:
        findings.append(
            Finding(
                "warn",
                "claude",
                f"no {' and no '.join(missing)} hook reports this agent's turns and tokens",
                fix,
            )
        )
    else:
        findings.append(
            Finding("ok", "claude", "the UserPromptSubmit and Stop hooks report for it")
        )
    return findings


def _hook_commands(settings: dict[str, Any], event: str) -> Iterator[str]:
    hooks = settings.get("hooks")
    groups = hooks.get(event) if isinstance(hooks, dict) else None
    for group in groups if isinstance(groups, list) else []:
        inner = group.get("hooks") if isinstance(group, dict) else None
        for hook in inner if isinstance(inner, list) else []:
            if isinstance(hook, dict) and isinstance(hook.get("command"), str):
                yield hook["command"]


# ---------------------------------------------------------------- all of it, in order


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
