"""A real tmux pane running an interactive bash, for tests of what our output and our notice
lines do to a shell: its history is appended after every command (to a file in the test's
folder), so a test sees every line bash ran, and its prompt is a plain `$ `."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.eventually import eventually
from tests.server import REPO_ROOT, clean_env

# Skipped without tmux or bash (apt-get install tmux bash), unless POCOLOBBY_REQUIRE_TMUX=1
# asks for them: then such a test runs, and fails.
NEEDS_TMUX_AND_BASH = pytest.mark.skipif(
    (shutil.which("tmux") is None or shutil.which("bash") is None)
    and os.environ.get("POCOLOBBY_REQUIRE_TMUX") != "1",
    reason="tmux or bash is not installed (apt-get install tmux; POCOLOBBY_REQUIRE_TMUX=1 fails)",
)


@dataclass
class ShellPane:
    socket: Path
    pane_id: str
    home: Path  # the shell's working directory
    history: Path  # its HISTFILE, appended after every command

    def tmux(self, *args: str) -> str:
        return subprocess.run(
            ["tmux", "-S", str(self.socket), *args],
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-J", "-t", self.pane_id)

    def title(self) -> str:
        return self.tmux("display-message", "-p", "-t", self.pane_id, "#{pane_title}").strip()

    def type(self, line: str) -> None:
        """Type a line and Enter, as a person (or an agent driving the shell) would."""
        self.tmux("send-keys", "-t", self.pane_id, "-l", line)
        self.enter()

    def enter(self) -> None:
        self.tmux("send-keys", "-t", self.pane_id, "Enter")

    def ran(self) -> list[str]:
        """Every line bash took as a command, in order."""
        return self.history.read_text().splitlines() if self.history.exists() else []

    def wait_for(self, predicate: Callable[[str], bool], timeout: float = 30.0) -> str:
        """The screen once `predicate` holds for it."""
        return eventually(
            lambda: screen if predicate(screen := self.screen()) else None,
            timeout=timeout,
            what=lambda: f"the pane showing what was expected:\n{self.screen()}",
        )

    def wait_for_prompt(self, prompts: int) -> str:
        """The screen once bash has shown `prompts` prompts (each command ends in one)."""
        return self.wait_for(lambda s: sum(line.startswith("$") for line in _lines(s)) >= prompts)


def _lines(screen: str) -> list[str]:
    return [line.rstrip() for line in screen.splitlines() if line.strip()]


def screen_lines(screen: str) -> list[str]:
    return _lines(screen)


@contextmanager
def shell_pane(folder: Path, env: Mapping[str, str] | None = None) -> Iterator[ShellPane]:
    """bash -i in a new tmux server (its own socket, no tmux configuration) in `folder`."""
    home = folder / "home"
    home.mkdir(parents=True, exist_ok=True)
    history = folder / "bash_history"
    history.touch()
    socket = Path("/tmp") / f"pl-shell-{uuid.uuid4().hex[:8]}"
    rc = folder / "bashrc"
    rc.write_text(
        f"HISTFILE={shlex.quote(str(history))}\nHISTSIZE=1000\nHISTCONTROL=\n"
        "PROMPT_COMMAND='history -a'\nPS1='$ '\n"
    )
    shell_env = clean_env(
        {
            "PYTHONPATH": str(REPO_ROOT),
            "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
            **(env or {}),
        }
    )
    shell_env.pop("TMUX", None)
    shell_env.pop("TMUX_PANE", None)
    subprocess.run(
        ["tmux", "-S", str(socket), "-f", "/dev/null", "new-session", "-d", "-s", "shell",
         "-x", "200", "-y", "50", "-c", str(home),
         f"bash --noprofile --rcfile {shlex.quote(str(rc))} -i"],
        env=shell_env, check=True, timeout=10,
    )  # fmt: skip
    pane = ShellPane(socket, "", home, history)
    try:
        pane.pane_id = pane.tmux("list-panes", "-t", "shell", "-F", "#{pane_id}").strip()
        pane.wait_for_prompt(1)
        yield pane
    finally:
        subprocess.run(["tmux", "-S", str(socket), "kill-server"], check=False, timeout=10)
        socket.unlink(missing_ok=True)
