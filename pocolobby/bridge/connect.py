"""`pocolobby connect`: register the bridge with the agent's host and say how to launch it.

Claude Code keeps a person's own servers for a project (its "local" scope, what `claude mcp add
--scope local` writes) in its state file, `~/.claude.json` (`$CLAUDE_CONFIG_DIR/.claude.json`),
under `projects[ROOT].mcpServers`, ROOT being the project's git root (a worktree's main
checkout) or else the directory; the shared, committed project file is `.mcp.json` (`--scope
project`), whose servers wait for approval until `.claude/settings.local.json` lists them. Codex CLI
reads `[mcp_servers.NAME]` tables from `$CODEX_HOME/config.toml` (`~/.codex/config.toml`);
Gemini CLI reads `mcpServers` from the project's `.gemini/settings.json`. The
entry names absolute paths (this installation's `pocolobby`, the configuration file), so it
works from any shell; every other server and setting in the file is kept as it is.

The TOML file is never re-serialised: the standard library reads TOML (tomllib) but does not
write it, and a round trip would drop the user's comments and layout. Instead only the lines of
our own table are replaced (or appended), and the result is parsed again and compared with the
original: everything but our table must be equal, or nothing is written.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import sys
import tempfile
import time
import tomllib
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from lobbies.wire.jsontext import PARSE_DEPTH, load_json
from pocolobby.bridge.config import ConfigError, load_config

SERVER_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
HOSTS = {"claude": "Claude Code", "codex": "Codex CLI", "gemini": "Gemini CLI"}
# Where a Claude Code entry goes: the person's own settings for the project, or the shared file.
CLAUDE_SCOPES = ("local", "project")
CLAUDE_LOCK_STALE_SECONDS = 10.0  # proper-lockfile's default: an older lock's holder is gone
GEMINI_TIMEOUT_MS = 600_000  # Gemini CLI's default request timeout for an MCP server


class ConnectError(Exception):
    """Something to tell the user in one line; nothing was written."""


def bridge_command() -> list[str]:
    """This installation's `pocolobby` executable, else this Python running the package."""
    script = Path(sys.executable).parent / ("pocolobby.exe" if os.name == "nt" else "pocolobby")
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script)]
    return [sys.executable, "-m", "pocolobby"]


def entry_for(config_path: Path, deliver: str = "channel") -> dict[str, Any]:
    command, *prefix = bridge_command()
    args = [*prefix, "bridge", "--config", str(config_path)]
    if deliver == "tmux":
        args += ["--deliver", "tmux"]
    return {"command": command, "args": args}


def _read_mcp_file(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    try:
        data = load_json(text, PARSE_DEPTH) if text.strip() else {}
    except ValueError:
        raise ConnectError(f"{path} is not valid JSON; fix or move it, then run again") from None
    if not isinstance(data, dict):
        raise ConnectError(f"{path} is not a JSON object")
    servers = data.get("mcpServers", {})
    if not isinstance(servers, dict):
        raise ConnectError(f"{path}: mcpServers is not an object")
    return data


def _write_atomically(path: Path, data: dict[str, Any] | str) -> None:
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            if isinstance(data, str):
                handle.write(data)
            else:
                json.dump(data, handle, indent=2)
                handle.write("\n")
            handle.flush()
            os.fsync(handle.fileno())
        if path.exists():
            os.chmod(temp, path.stat().st_mode & 0o777)
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def connect(
    config: str,
    name: str,
    directory: Path,
    *,
    host: str = "claude",
    deliver: str | None = None,
    environ: dict[str, str] | None = None,
    hooks: bool = True,
    replace: bool = False,
    scope: str = "local",
) -> str:
    """Write or update the host's entry (for Claude Code, with `hooks`, also its status line
    and turn hooks; `scope` says which of its files holds the entry); the text to print."""
    if not SERVER_NAME.match(name):
        raise ConnectError("--name: use letters, digits, '-' and '_' (at most 64)")
    if host not in HOSTS:
        raise ConnectError(f"--host: {', '.join(HOSTS)}")
    deliver = deliver or ("channel" if host == "claude" else "tmux")
    if host != "claude" and deliver != "tmux":
        raise ConnectError(
            f"--host {host} needs --deliver tmux: {HOSTS[host]} has no Claude Channels, so "
            "pushes can only reach it as a line typed into its tmux pane"
        )
    try:
        agent = load_config(config)
    except ConfigError as exc:
        raise ConnectError(str(exc)) from None
    if host == "codex":
        return _connect_codex(agent.path, name, agent, environ, replace)
    if host == "gemini":
        return _connect_gemini(directory, name, agent)
    if scope not in CLAUDE_SCOPES:
        raise ConnectError(f"--scope: {', '.join(CLAUDE_SCOPES)}")
    directory = directory.resolve()
    entry = entry_for(agent.path, deliver)
    env = os.environ if environ is None else environ
    if scope == "local":
        written = _add_claude_local(
            directory, name, entry, claude_state_file(env), (agent, replace)
        )
    else:
        written = _add_claude_project(directory, name, entry)
    lines = [
        f"{written}: {agent.lobby}/{agent.agent} at {agent.url}",
        *_other_claude_scope(directory, name, scope, claude_state_file(env)),
        *_set_claude_local_settings(directory, name, agent.path, hooks, scope == "project"),
        "",
    ]
    if deliver == "tmux":
        lines += [
            "Pushes are typed into the tmux pane Claude Code runs in. Start tmux, then launch "
            "Claude Code from this directory inside it:",
            "",
            f"  tmux new-session -s {_session_name(agent.agent)} {claude_env(env, 'env ')}claude",
            "",
            "(or run `claude` in any tmux pane: the bridge finds its pane from $TMUX_PANE).",
        ]
    else:
        lines += [
            "Launch Claude Code from this directory with:",
            "",
            f"  {claude_env(env)}claude --dangerously-load-development-channels server:{name}",
            "",
            "adding your usual flags (for example --remote-control or --permission-mode ...).",
        ]
    return "\n".join([*lines, *_keep_out_of_git(agent.path, directory)])


def claude_state_file(environ: Mapping[str, str]) -> Path:
    """Claude Code's own state file (local- and user-scope MCP servers, project approvals)."""
    configured = environ.get("CLAUDE_CONFIG_DIR")
    home = Path(configured) if configured else Path(environ.get("HOME") or Path.home())
    return home.expanduser() / ".claude.json"


def claude_project_key(directory: Path) -> str:
    """The key Claude Code files a project under in its state file: the root of the git
    repository the directory is in (for a worktree, the main checkout's), else the directory."""
    directory = directory.resolve()
    for folder in (directory, *directory.parents):
        dot_git = folder / ".git"
        if dot_git.is_dir():
            return str(folder)
        if dot_git.is_file():
            return str(_main_checkout(dot_git) or folder)
    return str(directory)


def _main_checkout(dot_git: Path) -> Path | None:
    """The main checkout of the worktree whose `.git` file this is (None for a submodule)."""
    try:
        named = dot_git.read_text(encoding="utf-8").strip().removeprefix("gitdir:").strip()
        gitdir = (dot_git.parent / named).resolve()
        common = (gitdir / (gitdir / "commondir").read_text(encoding="utf-8").strip()).resolve()
    except OSError:
        return None
    return common.parent if common.name == ".git" else None


def _claude_project_servers(data: dict[str, Any], path: Path, key: str) -> dict[str, Any]:
    projects = data.setdefault("projects", {})
    if not isinstance(projects, dict):
        raise ConnectError(f"{path}: projects is not an object")
    project = projects.setdefault(key, {})
    if not isinstance(project, dict):
        raise ConnectError(f"{path}: projects[{key!r}] is not an object")
    servers = project.setdefault("mcpServers", {})
    if not isinstance(servers, dict):
        raise ConnectError(f"{path}: projects[{key!r}].mcpServers is not an object")
    return servers


def claude_env(environ: Mapping[str, str], prefix: str = "") -> str:
    """`CLAUDE_CONFIG_DIR=... ` for a launch command when connect ran under one, else ''."""
    configured = environ.get("CLAUDE_CONFIG_DIR")
    return f"{prefix}CLAUDE_CONFIG_DIR={shlex.quote(configured)} " if configured else ""


def _add_claude_local(
    directory: Path, name: str, entry: dict[str, Any], path: Path, who: tuple[Any, bool]
) -> str:
    """Our entry in Claude Code's local scope for the project, as `claude mcp add-json --scope
    local` files it. The state file is Claude Code's busy own: read, change our one entry,
    write it whole in one rename, every other key kept; nothing is written when nothing
    changes. Another agent's entry there is replaced only when told (`who`: the agent's
    configuration and --replace)."""
    agent, replace = who
    key = claude_project_key(directory)
    where = f"mcpServers.{name} in {path} (Claude Code's local scope for {key})"
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    with claude_state_lock(path):
        data = _read_mcp_file(path)
        servers = _claude_project_servers(data, path, key)
        previous = servers.get(name)
        if previous == entry:
            return f"kept {where}"
        _check_not_another_agents(previous, agent, replace, where)
        servers[name] = entry
        _write_atomically(path, data)
    return f"{'updated' if previous else 'added'} {where}"


@contextlib.contextmanager
def claude_state_lock(path: Path, wait: float = 5.0) -> Iterator[None]:
    """Claude Code's own lock on its state file, held while we read and write it: Claude Code
    saves the file under a lock directory beside it (`<file>.lock`, node's proper-lockfile)
    and re-reads it first, so with the lock neither write loses the other's. A lock older
    than proper-lockfile's 10 s is stale (its holder died) and is taken over."""
    lock = Path(os.path.realpath(path)).with_name(Path(os.path.realpath(path)).name + ".lock")
    deadline = time.monotonic() + wait
    while True:
        try:
            lock.mkdir()
            break
        except FileExistsError:
            try:
                stale = time.time() - lock.stat().st_mtime > CLAUDE_LOCK_STALE_SECONDS
                if stale:
                    lock.rmdir()
                    continue
            except OSError:
                continue  # released meanwhile, or not a directory we may remove: try again
        if time.monotonic() > deadline:
            raise ConnectError(
                f"{lock} stays held (Claude Code saving its state?); run again in a moment. "
                "Nothing was written."
            )
        time.sleep(0.05)
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            lock.rmdir()


def _check_not_another_agents(previous: Any, agent: Any, replace: bool, where: str) -> None:
    """Refuse to replace the entry of another agent's configuration unless told."""
    other = _configured_agent(previous)
    if other is not None and other != str(agent.path) and not replace:
        raise ConnectError(
            f"{where} runs the bridge for another agent ({other}): Claude Code keeps one entry "
            "per repository (its worktrees and folders share it) and configuration directory. "
            "To run both, give this agent a Claude configuration directory of its own: "
            f"CLAUDE_CONFIG_DIR=~/.claude-{agent.agent} pocolobby connect --config "
            f"{agent.path} (the launch command then sets it; sign in there once: "
            "docs/hosts/claude-code.md), or --scope project in a checkout of its own. To "
            "replace the other, run again with --replace. Nothing was written."
        )


def _add_claude_project(directory: Path, name: str, entry: dict[str, Any]) -> str:
    """Our entry in the project's shared `.mcp.json` (`--scope project`)."""
    path = directory / ".mcp.json"
    data = _read_mcp_file(path)
    servers = data.setdefault("mcpServers", {})
    previous = servers.get(name)
    servers[name] = entry
    _write_atomically(path, data)
    verb = "kept" if previous == entry else ("updated" if previous else "added")
    return f"{verb} mcpServers.{name} in {path}"


def _other_claude_scope(directory: Path, name: str, scope: str, state: Path) -> list[str]:
    """A note when the other scope holds a server of the same name: Claude Code runs the
    local one and ignores the project's."""
    try:
        if scope == "local":
            other = _read_mcp_file(directory / ".mcp.json").get("mcpServers", {})
        else:
            projects = _read_mcp_file(state).get("projects")
            project = (
                projects.get(claude_project_key(directory)) if isinstance(projects, dict) else None
            )
            other = project.get("mcpServers") if isinstance(project, dict) else None
    except ConnectError:
        return []
    if not isinstance(other, dict) or name not in other:
        return []
    if scope == "local":
        return [
            f"Note: {directory / '.mcp.json'} also names a server {name} (an earlier connect "
            "--scope project?); Claude Code runs the local one. Remove it there unless your "
            "team shares it."
        ]
    return [
        f"Note: Claude Code's local scope ({state}) also has a server {name} for this project, "
        f"and runs that one instead: remove it with `claude mcp remove --scope local {name}`."
    ]


def _ours(group: Any, verb: str) -> bool:
    """A hook group this command wrote: one `pocolobby ... VERB --config ...` command."""
    commands = group.get("hooks") if isinstance(group, dict) else None
    return (
        isinstance(commands, list)
        and len(commands) == 1
        and isinstance(commands[0], dict)
        and f" {verb} --config " in str(commands[0].get("command", ""))
        and "pocolobby" in str(commands[0].get("command", ""))
    )


def _set_claude_local_settings(
    directory: Path, name: str, config: Path, hooks: bool, approve: bool
) -> list[str]:
    """Approve a `.mcp.json` entry and set the status line and the turn hooks in
    `.claude/settings.local.json`, the person's own settings for this project (Claude Code
    keeps it out of git), merging: anything else there is kept, a second run doubles nothing,
    and a status line of someone else's is kept and named."""
    if not (hooks or approve):
        return []
    path = directory / ".claude" / "settings.local.json"
    data = _read_mcp_file(path)
    said = []
    if approve:
        approved = data.setdefault("enabledMcpjsonServers", [])
        if not isinstance(approved, list):
            raise ConnectError(f"{path}: enabledMcpjsonServers is not a list")
        if name not in approved:
            approved.append(name)
        said.append(f"approved {name}")
    if hooks:
        command = [*bridge_command()]
        status = shlex.join([*command, "statusline", "--config", str(config)])
        hook = shlex.join([*command, "hook", "--config", str(config)])
        current = data.get("statusLine")
        if current is None or (
            isinstance(current, dict) and " statusline --config " in str(current.get("command"))
        ):
            data["statusLine"] = {"type": "command", "command": status}
            said.append("set the status line (plan usage)")
        else:
            said.append(
                "kept your own status line (docs/AGENTS.md, 'Status line and hooks', says how "
                "to report plan usage from it)"
            )
        events = data.setdefault("hooks", {})
        if not isinstance(events, dict):
            raise ConnectError(f"{path}: hooks is not an object")
        for event in ("UserPromptSubmit", "Stop"):
            groups = events.setdefault(event, [])
            if not isinstance(groups, list):
                raise ConnectError(f"{path}: hooks.{event} is not a list")
            groups[:] = [g for g in groups if not _ours(g, "hook")]
            groups.append({"hooks": [{"type": "command", "command": hook}]})
        said.append("set the UserPromptSubmit and Stop hooks (turns, tokens)")
    path.parent.mkdir(exist_ok=True)
    _write_atomically(path, data)
    trust = (
        ""
        if any((folder / ".git").exists() for folder in (directory, *directory.parents))
        else " (outside a git repository Claude Code reads them once it trusts this folder: "
        "its first launch here asks)"
    )
    return [f"in {path}: " + "; ".join(said) + trust]


def _keep_out_of_git(path: Path, directory: Path) -> list[str]:
    """A note when the agent's configuration (its token) sits inside the project."""
    try:
        path.relative_to(directory.resolve())
    except ValueError:
        return []
    return [
        f"Note: {path} holds the agent's token and sits inside this project; keep it out of "
        "version control (or move it, e.g. to ~/.config/pocolobby/, and run connect again)."
    ]


def _connect_gemini(directory: Path, name: str, agent: Any) -> str:
    """Gemini CLI's project `.gemini/settings.json`: our `mcpServers` entry, the rest kept.

    Gemini CLI starts a stdio server with its own environment minus variables whose names
    look like secrets; TMUX and TMUX_PANE pass, so the entry needs no `env`. `timeout` is
    Gemini CLI's own default for requests, written out because `gemini mcp list` otherwise
    gives a server only 5 s to start, less than Python and the MCP SDK take on a busy machine.
    """
    path = directory.resolve() / ".gemini" / "settings.json"
    data = _read_mcp_file(path)
    servers = data.setdefault("mcpServers", {})
    previous = servers.get(name)
    # Settings the owner added to our entry (`trust`, `includeTools`) are kept.
    kept = previous if isinstance(previous, dict) else {}
    entry = {**kept, **entry_for(agent.path, "tmux"), "timeout": GEMINI_TIMEOUT_MS}
    servers[name] = entry
    path.parent.mkdir(exist_ok=True)
    _write_atomically(path, data)
    verb = "kept" if previous == entry else ("updated" if previous else "added")
    session = _session_name(agent.agent)
    return "\n".join(
        [
            f"{verb} mcpServers.{name} in {path}: {agent.lobby}/{agent.agent} at {agent.url}",
            "",
            "Pushes are typed into the tmux pane Gemini CLI runs in. Launch it from this "
            "directory inside tmux:",
            "",
            f"  tmux new-session -s {session} gemini",
            "",
            "(or run `gemini` in any tmux pane). Gemini CLI starts a project's MCP servers only "
            "in a trusted folder: trust this one when its first start asks. Then check the "
            "server with `gemini mcp list` (it should say Connected).",
            *_keep_out_of_git(agent.path, directory),
        ]
    )


def _session_name(agent: str) -> str:
    """A tmux session name from the agent's validated name (letters, digits, '-', '_')."""
    return re.sub(r"[^A-Za-z0-9_-]", "-", agent)[:40] or "agent"


# ---------------------------------------------------------------- Codex CLI's config.toml

# Codex starts MCP servers with a cleared environment plus a short allowlist (HOME, PATH, ...);
# `env_vars` names what else to pass through: the bridge finds its pane from these two.
CODEX_ENV_VARS = ("TMUX", "TMUX_PANE")
_TABLE_HEADER = re.compile(r"^\s*\[\s*([^\[\]#]+?)\s*\]\s*(?:#.*)?$")
_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def codex_config_path(environ: dict[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    home = env.get("CODEX_HOME") or str(Path(env.get("HOME") or Path.home()) / ".codex")
    return Path(home) / "config.toml"


def toml_string(value: str) -> str:
    """A TOML basic string: JSON's escapes are TOML's, except DEL, which TOML wants escaped."""
    return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007F")


def codex_table(name: str, entry: dict[str, Any]) -> str:
    """Our `[mcp_servers.NAME]` table as TOML text (Codex's documented command/args shape)."""
    args = ", ".join(toml_string(a) for a in entry["args"])
    forwarded = ", ".join(toml_string(v) for v in CODEX_ENV_VARS)
    return (
        f"[mcp_servers.{name}]\n"
        "# Written by `pocolobby connect --host codex`; run it again to update.\n"
        f"command = {toml_string(entry['command'])}\n"
        f"args = [{args}]\n"
        f"env_vars = [{forwarded}]\n"
    )


def _header_path(line: str) -> list[str] | None:
    """The dotted key of a `[table]` header line (not `[[array]]`), else None."""
    if line.lstrip().startswith("[["):
        return None
    match = _TABLE_HEADER.match(line)
    if match is None:
        return None
    try:  # let tomllib split the dotted key, quoting included
        parsed = tomllib.loads(f"[{match.group(1)}]\n")
    except tomllib.TOMLDecodeError:
        return None
    path: list[str] = []
    node: Any = parsed
    while isinstance(node, dict) and len(node) == 1:
        key = next(iter(node))
        path.append(key)
        node = node[key]
    return path


def _without_our_table(text: str, name: str) -> tuple[str, bool]:
    """`text` with the lines of `[mcp_servers.NAME]` and its sub-tables removed."""
    kept: list[str] = []
    inside = found = False
    for line in text.splitlines(keepends=True):
        header = _header_path(line) if line.lstrip().startswith("[") else None
        if header is not None or line.lstrip().startswith("[["):
            inside = header is not None and header[:2] == ["mcp_servers", name]
            found = found or inside
        if not inside:
            kept.append(line)
    return "".join(kept), found


def config_after(words: Sequence[object], subcommand: str) -> str | None:
    """The `--config F` (or `--config=F`) a `pocolobby SUBCOMMAND ...` command line names: what
    connect wrote into a host's entry or hook, as connect and doctor both read it back."""
    line = [str(word) for word in words]
    if subcommand not in line:
        return None
    rest = line[line.index(subcommand) + 1 :]
    for i, word in enumerate(rest):
        if word == "--config" and i + 1 < len(rest):
            return rest[i + 1]
        if word.startswith("--config="):
            return word.removeprefix("--config=")
    return None


def _configured_agent(entry: Any) -> str | None:
    """The agent configuration a server entry runs the bridge with, if it is ours."""
    args = entry.get("args") if isinstance(entry, dict) else None
    return config_after(args, "bridge") if isinstance(args, list) else None


def _connect_codex(
    config_path: Path, name: str, agent: Any, environ: dict[str, str] | None, replace: bool
) -> str:
    path = codex_config_path(environ)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        text = ""
    try:
        before = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConnectError(f"{path} is not valid TOML ({exc}); fix it, then run again") from None
    servers = before.get("mcp_servers", {})
    if not isinstance(servers, dict):
        raise ConnectError(f"{path}: mcp_servers is not a table")
    entry = entry_for(config_path, "tmux")
    previous = servers.get(name)
    other = _configured_agent(previous)
    if other is not None and other != str(config_path) and not replace:
        raise ConnectError(
            f"[mcp_servers.{name}] in {path} runs the bridge for another agent ({other}): Codex "
            "reads one config.toml for every project, so replacing it moves every Codex "
            "session of this user to this agent. To run both, give this agent a Codex home "
            f"of its own: CODEX_HOME=~/.codex-{agent.agent} pocolobby connect --config "
            f"{config_path} --host codex (the launch command then sets it; copy or link your "
            "auth.json there). To replace the other, run again with --replace. Nothing was "
            "written."
        )
    rest, found = _without_our_table(text, name)
    rest = rest.rstrip() + "\n\n" if rest.strip() else ""
    updated = rest + codex_table(name, entry)
    try:
        after = tomllib.loads(updated)
    except tomllib.TOMLDecodeError:
        after = None
    expected = dict(before)
    expected["mcp_servers"] = {
        **servers,
        name: {**entry, "env_vars": list(CODEX_ENV_VARS)},
    }
    if after is None or after != expected or (previous is not None and not found):
        raise ConnectError(
            f"{path} defines mcp_servers.{name} in a form this command does not edit (a dotted "
            f"key or an inline table); remove that definition, then run again. Nothing was "
            "written."
        )
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    _write_atomically(path, updated)
    current = {**entry, "env_vars": list(CODEX_ENV_VARS)}
    verb = "kept" if previous == current else ("updated" if previous else "added")
    session = _session_name(agent.agent)
    home = (os.environ if environ is None else environ).get("CODEX_HOME")
    launch = f"env CODEX_HOME={shlex.quote(home)} " if home else ""
    return "\n".join(
        [
            f"{verb} [mcp_servers.{name}] in {path}: {agent.lobby}/{agent.agent} at {agent.url}",
            "",
            "Pushes are typed into the tmux pane Codex runs in. Launch Codex inside tmux:",
            "",
            f"  tmux new-session -s {session} {launch}codex --no-daemon",
            "",
            "(or run `codex --no-daemon` in any tmux pane). --no-daemon: otherwise Codex starts "
            "MCP servers from its shared background server, whose TMUX_PANE is the pane it was "
            "first started in. Codex passes the bridge only the variables in env_vars "
            f"({', '.join(CODEX_ENV_VARS)}) besides its defaults; check the server with "
            "`codex mcp list`.",
        ]
    )
