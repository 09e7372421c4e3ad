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
needs no new dependency (docs/DECISIONS.md, "tmux delivery").
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import hashlib
import os
import re
import shutil
import stat
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
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
#    `$`, `#`, `%` (bash, root, zsh; a digit before one is output such as "100%", except in
#    bash's own `bash-5.2$`), U+276F (starship), `>` (node, aider); or is only a
#    line program's prompt: Python's `>>>` and `...`, IPython's `In [N]:` and `...:`.
# 2. A full-screen agent: an input line holding only the prompt character (or the agent's
#    own placeholder text) with a rule or box border right above or below it, or holding the
#    agent's placeholder without one (Codex CLI, U+203A), anywhere in the bottom lines; and no
#    "esc to interrupt"/"esc to cancel" in those lines (the agent is mid-turn).
# To add an agent: its prompt character to PROMPT_CHARS, its empty-input placeholder to
# PLACEHOLDERS, its mid-turn words to BUSY_WORDS, and a screen of it to
# tests/bridge/test_pane_units.py.
PROMPT_CHARS = ">\u203a\u276f"
PROMPT = re.compile(
    f"(?:^|\\s)[{PROMPT_CHARS}]$|(?<![0-9])[$#%]$|(?:^|\\s)(?:ba)?sh-[0-9.]+[$#]$"
    "|^(?:>>>|\\.\\.\\.:?|In \\[[0-9]+\\]:)$"
)
PLACEHOLDERS = (
    "Type your message or @path/to/file",  # Gemini CLI
    "Ask Codex to do anything",  # Codex CLI, before its first turn
    "Ask a follow-up question",  # Codex CLI, after one
    'Try "',  # Claude Code's suggestion in an empty prompt
)
BUSY_WORDS = ("esc to interrupt", "esc to cancel")
# The pane's title mid-turn: Codex CLI puts a braille spinner frame before its title while a
# turn runs (its screen can show only the streamed text and an input line then); Codex and
# Gemini CLI title an approval prompt "Action Required", and Gemini a turn "Working…".
BUSY_TITLE = re.compile("^[\u2801-\u28ff]|Action Required|Working\u2026")
ENTER_DELAY = 0.3  # between the line and its Enter: Codex CLI reads a faster Enter as pasted
TAKE_SECONDS = 3.0  # how long a pane may take to show a typed line's Enter taken
TAKE_CHECK_SECONDS = 0.05
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


class PaneLockUnsafe(PaneError):
    """The pane lock's folder or file is not this user's alone: it is neither used nor
    followed, and nothing is typed (says why)."""


ACTIVITY_NAME = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,38}[a-z0-9])?$")  # lobbies.names
ACTIVITIES = frozenset({"working", "idle", "resting", "away", "not_responding"})
ACTIVITY_SHOWN = 20


def activity_line(changes: object) -> str:
    """The line typed for watched agents' activity (watch_agents): agent names and states only,
    each checked against their closed forms, so the line needs no escaping either."""
    shown = [
        f"{change['agent_id']} {change['activity']}"
        for change in (changes if isinstance(changes, list) else [])
        if isinstance(change, dict)
        and isinstance(change.get("agent_id"), str)
        and ACTIVITY_NAME.match(change["agent_id"])
        and change.get("activity") in ACTIVITIES
    ][:ACTIVITY_SHOWN]
    what = ", ".join(shown) or "changes"
    return f"{MARKER} activity: {what} - a fact for you, no reply needed (list_agents has more)"


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


def is_idle(screen: str, title: str = "") -> bool:
    """True when the agent waits for input: see the two shapes above; never while the pane's
    title says the agent is mid-turn."""
    if BUSY_TITLE.search(title):
        return False
    bottom = _bottom(screen)
    if not bottom:
        return False
    if PROMPT.search(bottom[-1]):
        return True
    if any(word in line.lower() for line in bottom for word in BUSY_WORDS):
        return False
    boxed = _input_lines(bottom)[:-1]
    return any(_empty_input(line) for line in boxed) or any(_placeholder(line) for line in bottom)


def _placeholder(line: str) -> bool:
    """An input line showing only an agent's empty-input placeholder, boxed or not (Codex CLI
    draws its input line without a rule)."""
    match = _INPUT_LINE.match(line)
    return match is not None and (match.group(1) or "").strip().startswith(PLACEHOLDERS)


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


def tmux_socket_dirs(environ: Mapping[str, str]) -> list[Path]:
    """Where this user's tmux servers put their sockets: $TMUX_TMPDIR's and /tmp's tmux-UID."""
    folder = f"tmux-{os.getuid()}"
    dirs = [Path(environ["TMUX_TMPDIR"]) / folder] if environ.get("TMUX_TMPDIR") else []
    return [*dirs, Path("/tmp") / folder]  # noqa: S108 - tmux's own fallback folder


def _socket_for(name: str, environ: Mapping[str, str]) -> str:
    """`--tmux-socket`: a path as `tmux -S` takes it, or a name as `tmux -L` takes it."""
    if "/" in name:
        return str(Path(name).expanduser().absolute())
    if name in ("", ".", "..") or "\0" in name:
        raise PaneError(f"--tmux-socket {name!r} is neither a socket path nor a server name")
    return str(tmux_socket_dirs(environ)[0] / name)


def _holds(socket: str, pane_id: str) -> bool | None:
    """Whether the server at `socket` has the pane; None when no server answers there."""
    try:
        done = subprocess.run(
            ["tmux", "-S", socket, "display-message", "-p", "-t", pane_id, "#{pane_id}"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=TMUX_TIMEOUT,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return None
    if done.returncode == 0:
        return done.stdout.strip() == pane_id
    lost = ("no server running", "error connecting", "connection refused", "no such file")
    return None if any(word in done.stderr.lower() for word in lost) else False


@dataclass(frozen=True)
class Pane:
    """One tmux pane on one tmux server, named by its socket's path.

    `idle_after` (seconds, `--idle-after`) lets a program without a recognised prompt take a
    notice once its screen has not changed for that long.
    """

    pane_id: str
    socket: str | None
    idle_after: float | None = None

    @classmethod
    def from_environment(
        cls,
        pane: str | None,
        environ: dict[str, str] | None = None,
        *,
        tmux_socket: str | None = None,
        idle_after: float | None = None,
    ) -> Pane:
        """The pane to type into and the server holding it: `--tmux-socket` when given; else
        $TMUX's server when it holds the pane (a bridge started inside tmux); else the one
        server among the user's sockets that holds it. PaneError says what was tried."""
        env = dict(os.environ) if environ is None else environ
        pane_id = (pane or env.get("TMUX_PANE") or "").strip()
        if not pane_id:
            raise PaneError("--deliver tmux needs a pane: run inside tmux or give --pane %N")
        if not PANE_ID.match(pane_id):
            raise PaneError(f"{pane_id!r} is not a tmux pane id (%N)")
        if shutil.which("tmux") is None:
            raise PaneError("--deliver tmux: tmux is not installed")
        if tmux_socket is not None:
            return cls(pane_id, _socket_for(tmux_socket, env), idle_after)
        own = (env.get("TMUX") or "").split(",")[0] or None
        if own is not None and (pane is None or _holds(own, pane_id)):
            return cls(pane_id, own, idle_after)
        tried = [own] if own else []
        sockets = [
            str(entry)
            for folder in tmux_socket_dirs(env)
            if folder.is_dir()
            for entry in sorted(folder.iterdir())
            if entry.is_socket() and str(entry) not in tried
        ]
        holders = [socket for socket in sockets if _holds(socket, pane_id)]
        tried += sockets
        if len(holders) == 1:
            return cls(pane_id, holders[0], idle_after)
        if holders:
            raise PaneError(
                f"pane {pane_id} is on {len(holders)} tmux servers ({', '.join(holders)}); "
                "pick one with --tmux-socket NAME|PATH"
            )
        where = (
            ", ".join(tried)
            if tried
            else f"no sockets in {', '.join(map(str, tmux_socket_dirs(env)))}"
        )
        raise PaneError(
            f"pane {pane_id} is on none of your tmux servers (tried: {where}); start the agent "
            "in tmux first, or give --tmux-socket NAME|PATH"
        )

    @property
    def server(self) -> str:
        """The server as errors name it."""
        return self.socket or "the default tmux server"

    def lock_path(self, environ: Mapping[str, str] | None = None) -> Path:
        """One lock file per tmux server and pane, shared by every writer of this user, in a
        folder no other user can write in (`lock_folder`); PaneLockUnsafe when there is none."""
        env = os.environ if environ is None else environ
        socket = self.socket or _socket_for("default", env)
        key = hashlib.sha256(f"{socket}\0{self.pane_id}".encode()).hexdigest()
        return lock_folder(Path(socket).parent, env) / f"pocolobby-pane-{key[:24]}.lock"

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
            raise PaneError(
                f"tmux {args[0]} on {self.server} did not answer in {TMUX_TIMEOUT:g} s"
            ) from None
        if process.returncode != 0:
            raise PaneError(
                f"tmux {args[0]} -t {self.pane_id} on {self.server}: {err.decode().strip()}"
            )
        return out.decode(errors="replace")

    async def check(self) -> None:
        """PaneError unless the pane exists now."""
        # tmux 3.3 answers a missing pane here with status 0 and an empty line.
        found = await self.tmux("display-message", "-p", "-t", self.pane_id, "#{pane_id}")
        if found.strip() != self.pane_id:
            raise PaneError(
                f"tmux display-message -t {self.pane_id} on {self.server}: no such pane"
            )

    async def busy_reason(self, quiet: Quiet | None = None) -> str | None:
        """None when the agent waits for input; otherwise why a notice must wait. With `quiet`
        (`--idle-after`), a screen without a recognised prompt that `quiet` saw unchanged long
        enough counts as waiting too."""
        # One tmux call, two commands: the pane's mode, state and cursor, then its screen; -J
        # joins lines the pane wrapped, so a long input line reads as the one line it is.
        output = await self.tmux(
            "display-message", "-p", "-t", self.pane_id,
            "#{pane_in_mode} #{pane_dead} #{cursor_x},#{cursor_y} #{pane_title}",
            ";", "capture-pane", "-p", "-J", "-t", self.pane_id,
        )  # fmt: skip
        state, _, screen = output.partition("\n")
        in_mode, dead, cursor, title = [*state.split(" ", 3), "0", "0", "", ""][:4]
        if dead != "0":
            return "the pane's program has exited"
        if in_mode != "0":
            return "the pane is in copy mode"
        if BUSY_TITLE.search(title):
            return "the agent is busy (its pane title says so)"
        if is_idle(screen):
            return None
        if is_unfinished_notice(screen):
            return UNFINISHED_REASON
        if quiet is not None:
            return quiet.reason(f"{cursor}\n{screen}")
        return "the agent is busy (no idle prompt)"

    async def type_line(self, line: str) -> None:
        """Type the line and its Enter, then wait (up to TAKE_SECONDS) until the pane shows the
        Enter taken: tmux answers before the program reads it, and a check in between would
        read our own line, still in the input, as one left without Enter and press Enter again
        (an empty line submitted; seen on a loaded machine)."""
        await self.tmux("send-keys", "-t", self.pane_id, "-l", line)
        await asyncio.sleep(ENTER_DELAY)
        await self.tmux("send-keys", "-t", self.pane_id, "Enter")
        deadline = time.monotonic() + TAKE_SECONDS
        while time.monotonic() < deadline:
            screen = await self.tmux("capture-pane", "-p", "-J", "-t", self.pane_id)
            if not is_unfinished_notice(screen):
                return
            await asyncio.sleep(TAKE_CHECK_SECONDS)


class Quiet:
    """`--idle-after`: how long the pane's screen (and cursor) has stayed as it is.

    The clock starts when a held notice first reads the screen, so a notice waits at least
    `seconds`; the line typed changes the screen, so the next one waits again.
    """

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._screen: str | None = None
        self._since = 0.0

    def reason(self, screen: str) -> str | None:
        """None once `screen` was seen unchanged for `seconds`; otherwise why not yet."""
        now = time.monotonic()
        if screen != self._screen:
            self._screen, self._since = screen, now
        if now - self._since >= self.seconds:
            return None
        return f"the screen changed in the last {self.seconds:g} s (--idle-after)"


def _not_private(folder: Path) -> str | None:
    """None when `folder` is a directory itself (not a symbolic link), owned by this user, that
    no other user may write in; otherwise why not."""
    try:
        found = os.lstat(folder)
    except OSError as exc:
        return f"{folder}: {exc.strerror}"
    if stat.S_ISLNK(found.st_mode):
        return f"{folder} is a symbolic link"
    if not stat.S_ISDIR(found.st_mode):
        return f"{folder} is not a directory"
    if found.st_uid != os.getuid():
        return f"{folder} belongs to user {found.st_uid}, not to this user ({os.getuid()})"
    if found.st_mode & 0o022:
        return f"{folder} can be written by other users (mode {stat.S_IMODE(found.st_mode):o})"
    return None


def lock_folder(socket_dir: Path, environ: Mapping[str, str]) -> Path:
    """Where the pane lock lives: the tmux socket's own folder when no other user can write in
    it (tmux makes /tmp/tmux-UID 0700); else a folder of ours made 0700,
    `$XDG_RUNTIME_DIR/pocolobby` or `$TMPDIR/pocolobby-UID` (/tmp's when unset), checked to be
    this user's and no symbolic link. The lock's name is predictable, so in a shared folder
    another user could plant a symbolic link or hold the lock (issue 39). PaneLockUnsafe says
    why none will do."""
    if not os.path.lexists(socket_dir):
        raise PaneError(f"{socket_dir} does not exist: no tmux server runs there")
    reasons = [_not_private(socket_dir)]
    if reasons[0] is None:
        return socket_dir
    shared = Path(environ.get("TMPDIR") or "/tmp")  # noqa: S108 - a folder of ours in it, checked
    runtime = environ.get("XDG_RUNTIME_DIR")
    ours = [Path(runtime) / "pocolobby"] if runtime else []
    for folder in [*ours, shared / f"pocolobby-{os.getuid()}"]:
        with contextlib.suppress(OSError):
            folder.mkdir(mode=0o700)
        reason = _not_private(folder)
        if reason is None:
            return folder
        reasons.append(reason)
    raise PaneLockUnsafe(f"no private folder for the pane lock: {'; '.join(map(str, reasons))}")


def _open_lock(path: Path) -> int:
    """The lock file, opened without following a symbolic link, and checked to be a file of
    this user's; PaneLockUnsafe otherwise."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise PaneLockUnsafe(
                f"the pane lock {path} is a symbolic link; it is not followed"
            ) from None
        raise PaneLockUnsafe(f"the pane lock {path} cannot be opened: {exc.strerror}") from None
    found = os.fstat(fd)
    if not stat.S_ISREG(found.st_mode) or found.st_uid != os.getuid():
        os.close(fd)
        raise PaneLockUnsafe(f"the pane lock {path} is not a file of this user's")
    return fd


@contextlib.contextmanager
def _flock(path: Path) -> Iterator[bool]:
    """Try the pane lock without blocking; yields whether it is held."""
    fd = _open_lock(path)
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
        self._quiet = Quiet(pane.idle_after) if pane.idle_after else None

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
                except PaneLockUnsafe as exc:
                    self.last_error = str(exc)
                    self._set_held(str(exc))
                    return "failed"
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
            reason = await self.pane.busy_reason(self._quiet)
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


# ---------------------------------------------------------------- turns seen in the pane

TURN_CHECK_SECONDS = 0.5  # how often the bridge reads the pane for turns
TURN_SETTLE_SECONDS = 2.0  # a state must hold this long to count: a flicker is not a turn
BUSY_PREFIX = "the agent is busy"


def host_of(client_name: str | None, headless: bool = False) -> str:
    """The host a pane-delivered bridge serves, by its MCP client's name (list_agents' `host`):
    a `--headless` bridge, or an unknown client, runs beside a shell or REPL."""
    name = (client_name or "").lower()
    if headless:
        return "shell"
    for word, host in (("codex", "codex"), ("gemini", "gemini"), ("claude", "claude-code")):
        if word in name:
            return host
    return "shell"


class TurnEdges:
    """Busy -> idle -> busy, debounced: a new state counts once it held `settle` seconds, and
    is dated when it was first seen. Copy mode, an exited program or our own unfinished line
    say nothing about a turn and change nothing. The bridge starts believing the pane idle."""

    def __init__(self, settle: float = TURN_SETTLE_SECONDS) -> None:
        self.settle = settle
        self.busy = False
        self._seen: bool | None = None
        self._seen_at = 0.0  # monotonic
        self._seen_wall = 0.0

    def observe(self, reason: str | None, mono: float, wall: float) -> tuple[str, float] | None:
        """("start" | "end", the wall time it began) once a change has settled; else None."""
        if reason is None:
            busy = False
        elif reason.startswith(BUSY_PREFIX):
            busy = True
        else:
            return None
        if busy == self.busy:
            self._seen = None
            return None
        if self._seen != busy:
            self._seen, self._seen_at, self._seen_wall = busy, mono, wall
        if mono - self._seen_at < self.settle:
            return None
        self.busy, self._seen = busy, None
        return ("start" if busy else "end", self._seen_wall)


async def watch_turns(
    pane: Pane,
    report: Callable[[str, float], object],
    *,
    every: float = TURN_CHECK_SECONDS,
    settle: float = TURN_SETTLE_SECONDS,
) -> None:
    """Read the pane every `every` seconds and `await report(event, at)` for each settled
    turn edge; a pane that cannot be read is read again later (the notices say why)."""
    edges = TurnEdges(settle)
    while True:
        try:
            reason: str | None = await pane.busy_reason()
        except PaneError:
            reason = "unreadable"
        edge = edges.observe(reason, time.monotonic(), time.time())
        if edge is not None:
            outcome = report(*edge)
            if asyncio.iscoroutine(outcome):
                await outcome
        await asyncio.sleep(every)
