"""The CLI explains itself: a version, a line for every command and a help line for every
argument, so `--help` at any depth tells a newcomer what a command does before they run it."""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Iterator
from importlib import metadata

from pocolobby.cli import build_parser


def _commands(
    parser: argparse.ArgumentParser, path: str = "pocolobby"
) -> Iterator[tuple[str, argparse.ArgumentParser, argparse.Action | None]]:
    """Every parser under `parser` with the subparsers action entry that names it."""
    yield path, parser, None
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help for choice in action._choices_actions}
            for name, child in action.choices.items():
                for sub_path, sub, _ in _commands(child, f"{path} {name}"):
                    entry = (
                        argparse.Action([], name, help=helps.get(name)) if sub is child else None
                    )
                    yield sub_path, sub, entry


def test_every_command_has_a_one_line_description() -> None:
    missing = [
        path for path, _parser, entry in _commands(build_parser()) if entry and not entry.help
    ]
    assert missing == []


def test_every_argument_has_a_help_line() -> None:
    missing = [
        f"{path} {action.option_strings[0] if action.option_strings else action.dest}"
        for path, parser, _entry in _commands(build_parser())
        for action in parser._actions
        if not isinstance(action, argparse._SubParsersAction | argparse._HelpAction)
        and not action.help
    ]
    assert missing == []


def test_version_prints_the_installed_release() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pocolobby", "--version"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"pocolobby {metadata.version('pocolobby')}"


def test_msg_help_speaks_to_the_agent_not_the_implementer() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pocolobby", "msg", "--help"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert "exit code" in done.stdout.lower()
    assert "MCP types" not in done.stdout
