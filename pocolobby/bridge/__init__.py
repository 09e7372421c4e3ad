"""The agent-side bridge: an MCP stdio server that one Claude Code session runs.

It pushes the broker's notices into the session as Claude Channel events and exposes the
broker's tool catalog plus a few local tools. It imports no Django: only the standard library,
mcp, httpx, websockets and pydantic, so an agent machine needs nothing of the broker.
"""

from __future__ import annotations

from importlib import metadata

SERVER_NAME = "pocolobby"


def bridge_version() -> str:
    """The installed package version, reported to the host and in get_context."""
    try:
        return metadata.version("pocolobby")
    except metadata.PackageNotFoundError:
        return "0+unknown"
