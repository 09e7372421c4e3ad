"""Delivery into a tmux pane, for agents without Claude Channels (issue 15, seed 000).

A push becomes one line typed into the agent's pane: a fixed marker, the notice's kind and
every message id, never a body (peer text typed into a terminal could run as a command). The
line is typed only while the pane shows an idle prompt, under an flock shared by every writer
to the same tmux server and pane, with `send-keys -l` for the literal text and Enter after it.
The caller reports `host_written` only after `deliver` answers "typed": at least once, never
early. A notice that waits is held (re-checked every second) up to `hold_seconds`, then given
up with `attention` reported, and the broker's retries offer it again.

Plain `tmux` commands rather than libtmux: the three calls per notice (`display-message ;
capture-pane` as one, `send-keys -l`, `send-keys Enter`) are one line each, and the bridge then
needs no new dependency (docs/DECISIONS.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

# A notice line starts as a shell comment: typed into a pane that holds a shell it runs nothing
# and prints nothing (`[pocolobby]`, the earlier marker, was a glob); an agent reads it as a
# sentence addressed to it.
MARKER = "# pocolobby:"
CHECK_SECONDS = 1.0  # how often a held notice re-checks the pane
HOLD_SECONDS = 300.0  # then the notice is given up; the broker's retries try again
TMUX_TIMEOUT = 5.0
PANE_ID = re.compile(r"^%[0-9]{1,9}$")
NONCE = re.compile(r"^[A-Za-z0-9_-]{1,128}$")
BACKLOG_IDS_SHOWN = 50  # a bootstrap line names at most this many waiting ids
# How a pane is read (docs/AGENTS.md, "Which prompts are recognised"). Two shapes of idle:
# 1. A shell or line REPL: the last non-blank line ends in its prompt with nothing after it:
#    `$`, `#`, `%` (bash, root, zsh), U+276F (starship), `>` (a REPL, aider).
# 2. A full-screen agent: an input line holding only the prompt character (or the agent's
#    own placeholder text) with a rule or box border right above or below it, anywhere in the
#    bottom lines, as Claude Code and Gemini CLI (`>`) and Codex CLI (U+203A) draw it; and no
#    "esc to interrupt"/"esc to cancel" in those lines (the agent is mid-turn).
# To add an agent: its prompt character to PROMPT_CHARS, its empty-input placeholder to
# PLACEHOLDERS, its mid-turn words to BUSY_WORDS, and a screen of it to
# tests/bridge/test_pane_units.py.
PROMPT_CHARS = ">\u203a\u276f"
PROMPT = re.compile(f"(?:^|\\s)[{PROMPT_CHARS}]$|(?<![0-9])[$#%]$")
PLACEHOLDERS = (
    "Type your message or @path/to/file",  # Gemini CLI
    "Ask Codex to do anything",  # Codex CLI
    'Try "',  # Claude Code's suggestion in an empty prompt
)
BUSY_WORDS = ("esc to interrupt", "esc to cancel")
BOTTOM_LINES = 8
_INPUT_LINE = re.compile(f"^[{PROMPT_CHARS}](?:\\s+(.*))?$")
_RULE = re.compile("^[\u2500-\u257f\\s]{3,}$")  # ─━═╭╮╰╯... and spaces only
# The box-drawing border some agents draw on either side of their input line.
_BORDER = "│┃|▌"
# A notice line of ours typed after a prompt but never submitted: a bridge died between the
# text and its Enter. Only the marker, fixed words, integers and a nonce can make it up.
UNFINISHED = re.compile(f"(?:^|\\s)[{PROMPT_CHARS}$#%]\\s+{re.escape(MARKER)} [A-Za-z0-9 ,:_-]+$")
UNFINISHED_REASON = "a notice line of ours was left without Enter"


class PaneError(Exception):
    """tmux is missing, the pane is not set or is gone; says which."""


def notice_line(kind: str, message_ids: list[int], nonce: str | None = None) -> str:
    """The one line typed for a notice: the marker (a shell comment), fixed words, integers and
    a checked nonce, so nothing in it can be interpreted by tmux or a shell, or act on a
    terminal: it needs no escaping (issue 28)."""
    ids = ",".join(str(int(i)) for i in message_ids)
    if kind == "bootstrap":
        proof = f" with nonce {nonce}" if nonce and NONCE.match(nonce) else ""
        waiting = ""
        if message_ids:  # the backlog: what waited for this new process (get_context lists it)
            shown = ",".join(str(int(i)) for i in message_ids[:BACKLOG_IDS_SHOWN])
            more = len(message_ids) - BACKLOG_IDS_SHOWN
            waiting = f" - waiting: ids {shown}" + (f" and {more} more" if more > 0 else "")
        return f"{MARKER} bootstrap: call get_context, then ready{proof}{waiting}"
    if kind == "receipts":
        return f"{MARKER} receipts: ids {ids} were read by their recipients"
    count = len(message_ids)
    noun = "message" if count == 1 else "messages"
    word = "reminder" if kind == "hint" else "new"
    return (
        f"{MARKER} {count} {word} {noun}: ids {ids} - call get_messages, then acknowledge_messages"
    )


def _bottom(screen: str) -> list[str]:
    """The last non-blank lines, stripped of whitespace and side borders."""
    lines = [line.strip().strip(_BORDER).strip() for line in screen.splitlines()]
    return [line for line in lines if line][-BOTTOM_LINES:]


def _empty_input(line: str) -> bool:
    match = _INPUT_LINE.match(line)
    if match is None:
        return False
    typed = (match.group(1) or "").strip()
    return not typed or typed.startswith(PLACEHOLDERS)


def is_idle(screen: str) -> bool:
    """True when the agent waits for input: see the two shapes above."""
    bottom = _bottom(screen)
    if not bottom:
        return False
    if PROMPT.search(bottom[-1]):
        return True
    if any(word in line.lower() for line in bottom for word in BUSY_WORDS):
        return False
    return any(_empty_input(line) for line in _input_lines(bottom)[:-1])


def _input_lines(bottom: list[str]) -> list[str]:
    """The lines that can be the current input: the last line, and boxed or ruled lines."""
    boxed = [
        line
        for index, line in enumerate(bottom)
        if any(
            _RULE.match(n)
            for n in bottom[max(0, index - 1) : index] + bottom[index + 1 : index + 2]
        )
    ]
    return [*boxed, bottom[-1]] if bottom else []


def is_unfinished_notice(screen: str) -> bool:
    """True when the input line holds one of our notice lines, typed but not submitted."""
    bottom = _bottom(screen)
    if any(word in line.lower() for line in bottom for word in BUSY_WORDS):
        return False
    return any(UNFINISHED.search(line) for line in _input_lines(bottom))


@dataclass(frozen=True)
class Pane:
    """One tmux pane on one tmux server (the socket from $TMUX, or tmux's default)."""

    pane_id: str
    socket: str | None

    @classmethod
    def from_environment(cls, pane: str | None, environ: dict[str, str] | None = None) -> Pane:
        env = dict(os.environ) if environ is None else environ
        pane_id = (pane or env.get("TMUX_PANE") or "").strip()
        if not pane_id:
            raise PaneError("--deliver tmux needs a pane: run inside tmux or give --pane %N")
        if not PANE_ID.match(pane_id):
            raise PaneError(f"{pane_id!r} is not a tmux pane id (%N)")
        if shutil.which("tmux") is None:
            raise PaneError("--deliver tmux: tmux is not installed")
        socket = (env.get("TMUX") or "").split(",")[0] or None
        return cls(pane_id, socket)

    def lock_path(self) -> Path:
        """One lock file per tmux server and pane, shared by every writer on this machine."""
        key = hashlib.sha256(f"{self.socket or 'default'}\0{self.pane_id}".encode()).hexdigest()
        return Path(tempfile.gettempdir()) / f"pocolobby-pane-{key[:24]}.lock"

    async def tmux(self, *args: str) -> str:
        command = ["tmux", *(("-S", self.socket) if self.socket else ()), *args]
        process = await asyncio.create_subprocess_exec(
            *command,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            out, err = await asyncio.wait_for(process.communicate(), TMUX_TIMEOUT)
        except TimeoutError:
            process.kill()
            raise PaneError(f"tmux {args[0]} did not answer in {TMUX_TIMEOUT:g} s") from None
        if process.returncode != 0:
            raise PaneError(f"tmux {args[0]} -t {self.pane_id}: {err.decode().strip()}")
        return out.decode(errors="replace")

    async def check(self) -> None:
        """PaneError unless the pane exists now."""
        await self.tmux("display-message", "-p", "-t", self.pane_id, "#{pane_id}")

    async def busy_reason(self) -> str | None:
        """None when the agent waits for input; otherwise why a notice must wait."""
        # One tmux call, two commands: the pane's mode and state, then its screen; -J joins
        # lines the pane wrapped, so a long input line reads as the one line it is.
        output = await self.tmux(
            "display-message", "-p", "-t", self.pane_id, "#{pane_in_mode} #{pane_dead}",
            ";", "capture-pane", "-p", "-J", "-t", self.pane_id,
        )  # fmt: skip
        state, _, screen = output.partition("\n")
        in_mode, dead = [*state.split(), "0", "0"][:2]
        if dead != "0":
            return "the pane's program has exited"
        if in_mode != "0":
            return "the pane is in copy mode"
        if is_idle(screen):
            return None
        if is_unfinished_notice(screen):
            return UNFINISHED_REASON
        return "the agent is busy (no idle prompt)"

    async def type_line(self, line: str) -> None:
        await self.tmux("send-keys", "-t", self.pane_id, "-l", line)
        await self.tmux("send-keys", "-t", self.pane_id, "Enter")


@contextlib.contextmanager
def _flock(path: Path) -> Iterator[bool]:
    """Try the pane lock without blocking; yields whether it is held."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


class PaneDelivery:
    """Types notices into one pane, one at a time, each only when the pane is idle.

    While a notice waits, `held_since` and `held_reason` say so; `on_change` is called with
    `attention=True` once a notice was held `hold_seconds` and given up (the broker then
    requires the owner's attention, as when a Channel's retries run out), and with False on
    any other change of the held state, so the bridge can report it.
    """

    def __init__(
        self,
        pane: Pane,
        hold_seconds: float = HOLD_SECONDS,
        on_change: Callable[[bool], None] | None = None,
    ) -> None:
        self.pane = pane
        self.hold_seconds = hold_seconds
        self.on_change = on_change
        self.held_since: float | None = None
        self.held_reason: str | None = None
        self.last_error: str | None = None
        self._one_at_a_time = asyncio.Lock()

    async def deliver(self, line: str, wanted: Callable[[], bool] = lambda: True) -> str:
        """Type `line` once the pane is idle, holding the pane lock: "typed"; "dropped" when
        `wanted` turned false first (its messages were acknowledged); "failed" when the pane is
        gone or never idle within the hold, and the broker will retry."""
        async with self._one_at_a_time:
            deadline = time.monotonic() + self.hold_seconds
            while True:
                if not wanted():
                    self._set_held(None)
                    return "dropped"
                try:
                    reason = await self._attempt(line, wanted)
                except PaneError as exc:
                    self.last_error = str(exc)
                    self._set_held(f"the pane cannot be reached: {exc}")
                    return "failed"
                if reason is None:
                    self.last_error = None
                    self._set_held(None)
                    return "typed"
                if not wanted():
                    self._set_held(None)
                    return "dropped"
                self._set_held(reason)
                if time.monotonic() >= deadline:
                    self.last_error = (
                        f"gave a notice up after {self.hold_seconds:g} s: {reason}; "
                        "the broker retries it"
                    )
                    self._set_held(self.last_error, attention=True)
                    return "failed"
                await asyncio.sleep(CHECK_SECONDS)

    def _set_held(self, reason: str | None, attention: bool = False) -> None:
        if reason is None:
            self.held_since = None
        else:
            self.held_since = self.held_since or time.time()
        changed = reason != self.held_reason
        self.held_reason = reason
        if (changed or attention) and self.on_change is not None:
            self.on_change(attention)

    async def _attempt(self, line: str, wanted: Callable[[], bool]) -> str | None:
        """None once the line and Enter were typed; otherwise why not (yet)."""
        with _flock(self.pane.lock_path()) as held:
            if not held:
                return "another writer holds the pane lock"
            reason = await self.pane.busy_reason()
            if reason == UNFINISHED_REASON:
                # Submit it: a whole notice, its ids still worth a look (at least once); the
                # prompt it leaves takes this notice on the next check.
                await self.pane.tmux("send-keys", "-t", self.pane.pane_id, "Enter")
            if reason is not None:
                return reason
            if not wanted():  # acknowledged meanwhile: the loop drops it
                return "its messages were acknowledged"
            await self.pane.type_line(line)
            return None
