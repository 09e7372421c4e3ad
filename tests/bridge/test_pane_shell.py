"""A notice line typed into a pane that holds a shell is inert: a real headless bridge types
into a real tmux pane running bash (issue 28). The earlier `[pocolobby]` marker was a glob: with
a file named `b` in the pane's folder bash ran the command `b`."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.bridge_client import send_message
from tests.server import REPO_ROOT, Broker, clean_env
from tests.shell_pane import NEEDS_TMUX_AND_BASH, screen_lines, shell_pane

pytest_plugins = ("tests.server_fixtures",)
pytestmark = [
    pytest.mark.slow,
    NEEDS_TMUX_AND_BASH,
]


def test_notice_lines_typed_into_bash_print_no_error_and_run_nothing(
    module_broker: Broker, tmp_path: Path
):
    configs = module_broker.provision("notice-shell", ["lead", "shell"], tmp_path / "configs")
    marker = tmp_path / "marker"
    commands = tmp_path / "bin"  # a command `b` that leaves the marker if anything runs it
    commands.mkdir()
    (commands / "b").write_text(f"#!/bin/sh\ntouch {marker}\n")
    (commands / "b").chmod(0o755)
    path = f"{commands}:{Path(sys.executable).parent}:/usr/bin:/bin"

    with shell_pane(tmp_path, {"PATH": path}) as pane:
        for name in ("b", "p", "y"):  # what a glob of the marker's letters would match
            (pane.home / name).touch()
        env = clean_env({"TMUX": f"{pane.socket},0,0", "CLAUDE_CODE_SESSION_ID": str(uuid.uuid4())})
        bridge = subprocess.Popen(
            [sys.executable, "-m", "pocolobby", "bridge", "--config",
             str(configs["shell"].path), "--deliver", "tmux", "--pane", pane.pane_id,
             "--headless"],
            cwd=REPO_ROOT, env=env, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            pane.wait_for(lambda s: "$ # pocolobby: bootstrap: call get_context" in s)
            sent = asyncio.run(
                send_message(module_broker.url, configs["lead"].token, "shell", "hi", "n-1")
            )
            notice = f"$ # pocolobby: 1 new message: ids {sent} - call get_messages"
            # the notice taken: bash's next prompt below it (its history written before that)
            screen = pane.wait_for(lambda s: screen_lines(s)[-1:] == ["$"] and notice in s)
        finally:
            bridge.terminate()
            code = bridge.wait(20)
            stderr = bridge.stderr.read() if bridge.stderr else ""
        assert code == 0, stderr

        # Only prompts and our lines: no "command not found", no "No such file", nothing run.
        # Exactly our two lines and the prompt: no error, and no empty Enter between them.
        lines = screen_lines(screen)
        assert [line.startswith("$ # pocolobby: ") for line in lines] == [True, True, False]
        assert lines[1].startswith(notice) and lines[2] == "$", screen
        assert not marker.exists()
        assert [line.startswith("# pocolobby: ") for line in pane.ran()] == [True, True]
