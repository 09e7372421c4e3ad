"""The host setup in a project directory: the MCP entries `pocolobby connect` writes (Claude
Code's `.mcp.json` or its local and user scopes in `~/.claude.json`, Codex CLI's
`config.toml`, Gemini CLI's `.gemini/settings.json`), Claude Code's approval of a project
server, its status line and hooks, and the host programs on PATH."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lobbies.wire.jsontext import PARSE_DEPTH, load_json
from pocolobby.bridge.connect import (
    HOSTS,
    claude_project_key,
    claude_state_file,
    codex_config_path,
    config_after,
)
from pocolobby.doctor.checks import Environ, Finding, resolved

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
        named = config_after(self.args, "bridge")
        return None if named is None else resolved(named)

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


def _home(environ: Environ) -> Path:
    return Path(environ.get("HOME") or Path.home())


def _claude_project(state: dict[str, Any] | None, directory: Path) -> dict[str, Any]:
    projects = (state or {}).get("projects")
    project = projects.get(claude_project_key(directory)) if isinstance(projects, dict) else None
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


# ---------------------------------------------------------------- which configuration


def locate_config(
    given: str | None, directory: Path, environ: Environ
) -> tuple[Path | None, Finding | None]:
    """--config, else $POCOLOBBY_CONFIG, else the one configuration the directory's host
    entries run the bridge with; a failure when none (or several) is found."""
    if given:
        return resolved(given), None
    if environ.get("POCOLOBBY_CONFIG"):
        return resolved(environ["POCOLOBBY_CONFIG"]), None
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


# ---------------------------------------------------------------- the host setup


def _connect_fix(config: Path, directory: Path, host: str = "") -> str:
    flag = f" --host {host}" if host else ""
    return f"in {directory}: pocolobby connect --config {shlex.quote(str(config))}{flag}" + (
        "" if host else " (add --host codex or --host gemini for those hosts)"
    )


def check_hosts(config: Path, directory: Path, environ: Environ) -> list[Finding]:
    entries, problems = host_entries(directory, environ)
    # A warning: the host that reads it may not be this agent's; if it held this agent's
    # entry, the failure below says that none was found.
    findings = [
        Finding("warn", "host", problem, "fix or move that file, then connect again")
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
    named = config_after(words, subcommand) or env.get("POCOLOBBY_CONFIG")
    return named is not None and resolved(named) == config


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
