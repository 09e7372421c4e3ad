"""`pocolobby connect`: register the bridge in a project's `.mcp.json` and say how to launch.

Claude Code reads project MCP servers from `.mcp.json` in the directory it starts in. The entry
names absolute paths (this installation's `pocolobby`, the configuration file), so it works
from any shell; other servers in the file are kept as they are.
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

from pocolobby.bridge.config import ConfigError, load_config

SERVER_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class ConnectError(Exception):
    """Something to tell the user in one line; nothing was written."""


def bridge_command() -> list[str]:
    """This installation's `pocolobby` executable, else this Python running the package."""
    script = Path(sys.executable).parent / ("pocolobby.exe" if os.name == "nt" else "pocolobby")
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script)]
    return [sys.executable, "-m", "pocolobby"]


def entry_for(config_path: Path) -> dict[str, Any]:
    command, *prefix = bridge_command()
    return {"command": command, "args": [*prefix, "bridge", "--config", str(config_path)]}


def _read_mcp_file(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    try:
        data = json.loads(text) if text.strip() else {}
    except ValueError:
        raise ConnectError(f"{path} is not valid JSON; fix or move it, then run again") from None
    if not isinstance(data, dict):
        raise ConnectError(f"{path} is not a JSON object")
    servers = data.get("mcpServers", {})
    if not isinstance(servers, dict):
        raise ConnectError(f"{path}: mcpServers is not an object")
    return data


def _write_atomically(path: Path, data: dict[str, Any]) -> None:
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
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


def connect(config: str, name: str, directory: Path) -> str:
    """Write or update `directory/.mcp.json`; the text to print."""
    if not SERVER_NAME.match(name):
        raise ConnectError("--name: use letters, digits, '-' and '_' (at most 64)")
    try:
        agent = load_config(config)
    except ConfigError as exc:
        raise ConnectError(str(exc)) from None
    path = directory.resolve() / ".mcp.json"
    data = _read_mcp_file(path)
    servers = data.setdefault("mcpServers", {})
    entry = entry_for(agent.path)
    previous = servers.get(name)
    servers[name] = entry
    _write_atomically(path, data)
    verb = "kept" if previous == entry else ("updated" if previous else "added")
    lines = [
        f"{verb} mcpServers.{name} in {path}: {agent.lobby}/{agent.agent} at {agent.url}",
        "",
        "Launch Claude Code from this directory with:",
        "",
        f"  claude --dangerously-load-development-channels server:{name}",
        "",
        "adding your usual flags (for example --remote-control or --permission-mode ...).",
        "Claude Code asks once to approve the project's MCP server; approve it.",
    ]
    try:
        agent.path.relative_to(directory.resolve())
    except ValueError:
        pass
    else:
        lines.append(
            f"Note: {agent.path} holds the agent's token and sits inside this project; keep it "
            "out of version control (or move it, e.g. to ~/.pocolobby/, and run connect again)."
        )
    return "\n".join(lines)
