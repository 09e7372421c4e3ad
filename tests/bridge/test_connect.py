"""`pocolobby connect`: the project's `.mcp.json` entry and the launch command, run as the real
CLI; and a bridge started from exactly the command that entry names.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.bridge.host import Host
from tests.server import REPO_ROOT, Broker, clean_env

pytest_plugins = ("tests.server_fixtures",)


def connect(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pocolobby", "connect", *args],
        cwd=project,
        env=clean_env({"PYTHONPATH": str(REPO_ROOT)}),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def agent_file(directory: Path, name: str = "beta.json") -> Path:
    path = directory / name
    path.write_text(
        json.dumps(
            {"url": "http://127.0.0.1:8787", "token": "plt_x", "lobby": "team", "agent": "beta"}
        )
    )
    path.chmod(0o600)
    return path


def test_connect_adds_the_bridge_keeps_other_servers_and_prints_the_launch_command(
    tmp_path: Path,
):
    project, home = tmp_path / "project", tmp_path / "home"
    project.mkdir()
    home.mkdir()
    config = agent_file(home)
    other = {"command": "npx", "args": ["some-server"], "env": {"A": "1"}}
    (project / ".mcp.json").write_text(json.dumps({"mcpServers": {"other": other}, "x": 1}))

    result = connect(project, "--config", str(config))
    assert result.returncode == 0, result.stderr
    assert "claude --dangerously-load-development-channels server:pocolobby" in result.stdout
    assert "usual flags" in result.stdout and "added mcpServers.pocolobby" in result.stdout
    data = json.loads((project / ".mcp.json").read_text())
    assert data["x"] == 1 and data["mcpServers"]["other"] == other
    entry = data["mcpServers"]["pocolobby"]
    assert Path(entry["command"]).is_absolute()
    assert entry["args"][-3:] == ["bridge", "--config", str(config.resolve())]

    again = connect(project, "--config", str(config))
    assert again.returncode == 0 and "kept mcpServers.pocolobby" in again.stdout
    named = connect(project, "--config", str(config), "--name", "lobby-b")
    assert "server:lobby-b" in named.stdout
    assert set(json.loads((project / ".mcp.json").read_text())["mcpServers"]) == {
        "other",
        "pocolobby",
        "lobby-b",
    }


def test_connect_refuses_what_it_cannot_use_and_leaves_the_file_alone(tmp_path: Path):
    config = agent_file(tmp_path)
    broken = '{"mcpServers": {'
    (tmp_path / ".mcp.json").write_text(broken)
    result = connect(tmp_path, "--config", str(config))
    assert result.returncode == 1 and "not valid JSON" in result.stderr
    assert (tmp_path / ".mcp.json").read_text() == broken

    fresh = tmp_path / "fresh"
    fresh.mkdir()
    missing = connect(fresh, "--config", str(tmp_path / "nope.json"))
    assert missing.returncode == 1 and "no agent configuration" in missing.stderr
    bad_name = connect(fresh, "--config", str(config), "--name", "has space")
    assert bad_name.returncode == 1 and "--name" in bad_name.stderr
    assert not (fresh / ".mcp.json").exists()

    inside = connect(tmp_path / "fresh", "--config", str(agent_file(fresh, "inside.json")))
    assert inside.returncode == 0 and "keep it out of version control" in inside.stdout


@pytest.mark.slow
@pytest.mark.asyncio
async def test_the_written_entry_starts_a_working_bridge(module_broker: Broker, tmp_path: Path):
    configs = module_broker.provision("connected", ["beta"], tmp_path / "configs")
    project = tmp_path / "project"
    project.mkdir()
    result = connect(project, "--config", str(configs["beta"].path))
    assert result.returncode == 0, result.stderr
    entry = json.loads((project / ".mcp.json").read_text())["mcpServers"]["pocolobby"]
    host = Host(
        configs["beta"].path,
        str(uuid.uuid4()),
        tmp_path / "bridge.log",
        command=[entry["command"], *entry["args"]],
    )
    await host.start()
    try:
        _, context = await host.bootstrapped()
        assert context["bridge"]["agent_id"] == "beta"
    finally:
        assert await host.close() == 0
