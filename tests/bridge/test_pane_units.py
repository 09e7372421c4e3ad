"""The pane classification and the typed line, as pure functions (tests/bridge/test_pane.py
drives them through a real tmux server). Claude Code's screens below are written from its
documented layout; Codex CLI's and Gemini CLI's are captured from the real programs."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from pocolobby.bridge.pane import (
    Pane,
    PaneDelivery,
    PaneLockUnsafe,
    is_idle,
    is_unfinished_notice,
    notice_line,
)

CLAUDE_CODE = """
  I'll look at the migration next.

╭──────────────────────────────────────────────╮
│ >                                            │
╰──────────────────────────────────────────────╯
  ? for shortcuts
"""
CLAUDE_CODE_RULES = """
⏺ Done.

──────────────────────────────────────────────────
> Try "refactor <filepath>"
──────────────────────────────────────────────────
  ? for shortcuts                     Context left: 61%
"""
SCREENS = Path(__file__).with_name("screens")


def captured(name: str) -> tuple[str, str]:
    """A screen captured from the real program in tmux (`capture-pane -p -J`, after a first
    line with its `#{pane_title}`): Codex CLI 0.171.0 and Gemini CLI 0.61.0 run offline against
    tests/bridge/model_standin.py, as tests/bridge/test_hosts.py runs them."""
    title, _, screen = (SCREENS / f"{name}.txt").read_text(encoding="utf-8").partition("\n")
    return screen, title.removeprefix("title: ")


CODEX, _ = captured("codex-idle")
GEMINI, _ = captured("gemini-idle")


@pytest.mark.parametrize("name", ["codex-idle", "gemini-idle"])
def test_the_real_hosts_idle_screens_read_as_idle(name: str) -> None:
    screen, title = captured(name)
    assert is_idle(screen, title)


@pytest.mark.parametrize("name", ["codex-busy", "codex-approval", "gemini-busy", "gemini-approval"])
def test_the_real_hosts_mid_turn_and_approval_screens_are_held(name: str) -> None:
    screen, title = captured(name)
    assert not is_idle(screen, title)


def test_codex_mid_turn_is_told_only_by_its_title() -> None:
    """While Codex CLI streams a reply its screen shows the text and an empty input line,
    like its idle screen; the spinner frame before its title is what says it is working."""
    screen, title = captured("codex-busy")
    assert is_idle(screen) and not is_idle(screen, title)


@pytest.mark.parametrize(
    "screen",
    [
        "Welcome\n> ",  # a plain REPL (the fake agent of the tmux tests), aider
        "user@host:~/repo$ ",  # bash
        "root@host:/# ",
        "~/repo \u276f ",  # starship / zsh
        "bash-5.2$ ",  # bash --norc: its version before the $
        "sh-5.2# ",
        "Python 3.11.7\n>>> ",  # python3 -i
        ">>> def f():\n...     ",  # Python's continuation prompt
        "In [3]: ",  # IPython
        "In [3]: for x in y:\n   ...: ",
        "Welcome to Node.js v20.20.2.\n> ",  # node
        "% ",  # zsh
        CLAUDE_CODE,
        CLAUDE_CODE_RULES,
        CODEX,
        GEMINI,
    ],
)
def test_recognised_prompts_read_as_idle(screen: str) -> None:
    assert is_idle(screen)


@pytest.mark.parametrize(
    "screen",
    [
        "> half a sentence",  # the user is mid-line
        "working...",  # an agent mid-turn
        "price: 100$",  # a digit before $ is not a prompt
        "compiling 100%",
        "Loading...",  # an ellipsis after words is output, not Python's `...`
        ">>> print(1",  # typed after Python's prompt
        "In [4]: x = ",
        "",
        CLAUDE_CODE.replace("│ >      ", "│ > fix t"),  # typed into Claude Code's box
        CLAUDE_CODE.replace("? for shortcuts", "✳ Thinking… (esc to interrupt)"),
        GEMINI.replace("Type your message or @path/to/file", "explain the diff"),
        CODEX.replace("Ask Codex to do anything", "run the linter"),
    ],
)
def test_busy_or_mid_line_panes_are_not_idle(screen: str) -> None:
    assert not is_idle(screen)


def test_only_our_own_whole_notice_counts_as_unfinished() -> None:
    line = notice_line("messages", [4, 5])
    assert is_unfinished_notice(f"> {line}")
    assert is_unfinished_notice(f"│ > {notice_line('bootstrap', [], 'n0nce_-x')} │")
    assert not is_unfinished_notice(f"> rm -rf / {line}")  # user text first: not ours
    assert not is_unfinished_notice(line)  # no prompt before it: output, not input
    assert not is_unfinished_notice("> # pocolobby: $(id)")


def test_the_typed_line_carries_ids_and_only_safe_characters() -> None:
    assert notice_line("messages", [41, 42]) == (
        "# pocolobby: 2 new messages: ids 41,42 - call get_messages, then acknowledge_messages"
    )
    assert notice_line("hint", [7]).startswith("# pocolobby: 1 reminder message: ids 7 ")
    assert notice_line("receipts", [3]) == (
        "# pocolobby: receipts: ids 3 were read by their recipients"
    )
    # a nonce that is not the broker's shape is left out rather than typed
    assert notice_line("bootstrap", [], "$(rm -rf ~)") == (
        "# pocolobby: bootstrap: call get_context, then ready"
    )


def test_an_unfinished_notice_is_found_inside_an_agents_input_box() -> None:
    line = notice_line("messages", [9])
    boxed = CLAUDE_CODE.replace("│ >      ", f"│ > {line}", 1)
    assert is_unfinished_notice(boxed) and not is_idle(boxed)


def test_a_notice_already_submitted_above_a_busy_line_is_not_unfinished() -> None:
    line = notice_line("bootstrap", [], "abc")
    assert not is_unfinished_notice(f"> {line}\n> busy 12\nworking...")
    assert is_unfinished_notice(f"> {line}\n> {notice_line('messages', [3])}")


def test_a_bootstrap_line_names_the_backlog_that_waited_for_the_new_process() -> None:
    assert notice_line("bootstrap", [3, 4], "n") == (
        "# pocolobby: bootstrap: call get_context, then ready with nonce n - waiting: ids 3,4"
    )
    long = notice_line("bootstrap", list(range(1, 121)), "n")
    assert long.endswith(",50 and 70 more") and is_unfinished_notice(f"> {long}")


def _folder(path: Path, mode: int = 0o700) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(mode)
    return path


@pytest.mark.asyncio
async def test_a_symbolic_link_planted_where_the_pane_lock_goes_is_not_followed(
    tmp_path: Path,
) -> None:
    sockets = _folder(tmp_path / "tmux-1000")  # as tmux makes it: 0700
    pane = Pane("%1", str(sockets / "default"))
    lock = pane.lock_path()
    assert lock.parent == sockets
    target = _folder(tmp_path / "elsewhere") / "made-through-the-link"
    lock.symlink_to(target)
    delivery = PaneDelivery(pane, hold_seconds=0)
    assert await delivery.deliver("x") == "failed"
    assert delivery.held_reason == f"the pane lock {lock} is a symbolic link; it is not followed"
    assert delivery.last_error == delivery.held_reason  # what the bridge logs and reports
    assert not target.exists() and lock.is_symlink()


def test_a_socket_in_a_shared_folder_gets_its_pane_lock_in_a_private_one(tmp_path: Path) -> None:
    shared = _folder(tmp_path / "shared", 0o1777)  # /tmp, `tmux -S /tmp/team`
    pane = Pane("%1", str(shared / "team"))
    runtime = _folder(tmp_path / "run")
    lock = pane.lock_path({"XDG_RUNTIME_DIR": str(runtime), "TMPDIR": str(shared)})
    assert lock.parent == runtime / "pocolobby"
    assert stat.S_IMODE(lock.parent.stat().st_mode) == 0o700
    lock = pane.lock_path({"TMPDIR": str(shared)})
    assert lock.parent == shared / f"pocolobby-{os.getuid()}"
    assert stat.S_IMODE(lock.parent.stat().st_mode) == 0o700


def test_a_lock_folder_someone_else_could_write_or_made_a_link_is_refused(tmp_path: Path) -> None:
    shared = _folder(tmp_path / "shared", 0o1777)
    env = {"TMPDIR": str(shared)}
    pane = Pane("%1", str(shared / "team"))
    planted = shared / f"pocolobby-{os.getuid()}"
    _folder(planted, 0o777)
    with pytest.raises(PaneLockUnsafe, match="can be written by other users \\(mode 777\\)"):
        pane.lock_path(env)
    planted.rmdir()
    planted.symlink_to(_folder(tmp_path / "theirs"))
    with pytest.raises(PaneLockUnsafe, match=f"{planted} is a symbolic link"):
        pane.lock_path(env)
    assert list((tmp_path / "theirs").iterdir()) == []


@pytest.mark.skipif(os.getuid() != 0, reason="making a folder another user's needs root")
def test_a_lock_folder_owned_by_another_user_is_refused(tmp_path: Path) -> None:
    shared = _folder(tmp_path / "shared", 0o1777)
    planted = _folder(shared / "pocolobby-0")
    os.chown(planted, 65534, 65534)
    sockets = _folder(tmp_path / "tmux-0")
    os.chown(sockets, 65534, 65534)
    with pytest.raises(PaneLockUnsafe, match="belongs to user 65534") as refused:
        Pane("%1", str(sockets / "default")).lock_path({"TMPDIR": str(shared)})
    assert f"{sockets} belongs to user 65534" in str(refused.value)
    assert list(planted.iterdir()) == []
