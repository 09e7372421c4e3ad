"""What an agent's Claude Code reports besides messages: plan usage, turns and token counts.

`pocolobby statusline` (Claude Code's status line command), `pocolobby hook` (its
UserPromptSubmit and Stop hooks) and `pocolobby tokens` run here. They import no Django and no
HTTP library beyond the standard one, because Claude Code starts them on every status refresh
and every turn: they must answer fast, never print what the session would read as context,
and never let a broker that is down break the session.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from lobbies.wire.jsontext import PARSE_DEPTH, JSONObject, JSONValue, load_json
from pocolobby.bridge.config import AgentConfig, ConfigError, load_config
from pocolobby.bridge.turns import record_turn

NETWORK_TIMEOUT = 2.0  # seconds: a status line or a hook must not hang the session
RESEND_SECONDS = 300  # send an unchanged reading again after 5 minutes
EMAIL_SECONDS = 300  # ask `claude auth status` at most every 5 minutes
CLAUDE_TIMEOUT = 2.0
WEEK_SECONDS = 7 * 24 * 3600
OFF_PACE_POINTS = 5.0


def config_path(raw: str | None) -> str:
    value = raw or os.environ.get("POCOLOBBY_CONFIG", "")
    if not value:
        raise ConfigError("give --config FILE or set POCOLOBBY_CONFIG")
    return value


def _send(config: AgentConfig, method: str, path: str, body: JSONObject, timeout: float) -> int:
    """One JSON request with the agent's token; the HTTP status, or 0 if it never answered."""
    request = urllib.request.Request(  # noqa: S310 (the url is the agent's http(s) broker)
        f"{config.url}/v1/{path}",
        data=json.dumps(body).encode(),
        method=method,
        headers={
            "Authorization": f"Bearer {config.token}",
            "Content-Type": "application/json",
            "User-Agent": "pocolobby-reports",
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except (OSError, ValueError):
        return 0


# ---------------------------------------------------------------- state next to the config


def _state_path(config: AgentConfig) -> Path:
    return config.path.parent / f".{config.path.name}.reports.json"


def _read_state(path: Path) -> JSONObject:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_state(path: Path, state: JSONObject) -> None:
    """Mode 0600 from the start, replaced atomically; a failure only costs a resend."""
    temp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    with contextlib.suppress(OSError):
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(state, handle)
        os.replace(temp, path)
    with contextlib.suppress(OSError):
        temp.unlink(missing_ok=True)


# ---------------------------------------------------------------- status line


@dataclass(frozen=True)
class Window:
    used: float
    resets_at: int

    @property
    def left(self) -> float:
        return max(0.0, 100.0 - self.used)


def _window(data: JSONValue) -> Window | None:
    if not isinstance(data, dict):
        return None
    used, resets = data.get("used_percentage"), data.get("resets_at")
    if isinstance(used, bool) or isinstance(resets, bool):
        return None
    if not isinstance(used, int | float) or not isinstance(resets, int | float):
        return None
    if not 0 <= used <= 100:
        return None
    return Window(float(used), int(resets))


def pace_words(week: Window, now: float) -> str:
    elapsed = min(max((now - (week.resets_at - WEEK_SECONDS)) / WEEK_SECONDS, 0.0), 1.0)
    pace = week.used - elapsed * 100
    if abs(pace) <= OFF_PACE_POINTS:
        return "on pace"
    return f"{abs(pace):.0f} ahead" if pace > 0 else f"{abs(pace):.0f} behind"


def status_text(name: str, data: JSONObject, now: float) -> str:
    raw_limits = data.get("rate_limits")
    limits = raw_limits if isinstance(raw_limits, dict) else {}
    five, week = _window(limits.get("five_hour")), _window(limits.get("seven_day"))
    parts = [name]
    if five is not None and five.resets_at > now:
        parts.append(f"5h {five.left:.0f}% left")
    if week is not None and week.resets_at > now:
        parts.append(f"week {week.left:.0f}% left ({pace_words(week, now)})")
    if len(parts) == 1:
        model = data.get("model")
        display = model.get("display_name") if isinstance(model, dict) else None
        if isinstance(display, str):
            parts.append(display[:40])
    return " · ".join(parts)


def _find_email(data: JSONValue) -> str | None:
    if isinstance(data, dict):
        for key in ("email", "emailAddress", "email_address"):
            value = data.get(key)
            if isinstance(value, str) and "@" in value:
                return value.strip()
        for value in data.values():
            found = _find_email(value)
            if found:
                return found
    return None


def claude_account_email() -> str | None:
    """The signed-in account from `claude auth status --json`; None if claude is missing."""
    claude = shutil.which("claude")
    if claude is None:
        return None
    try:
        done = subprocess.run(
            [claude, "auth", "status", "--json"],
            capture_output=True,
            text=True,
            timeout=CLAUDE_TIMEOUT,
            check=False,
            stdin=subprocess.DEVNULL,
        )
        return _find_email(json.loads(done.stdout))
    except (OSError, ValueError, subprocess.SubprocessError):
        return None


def statusline(raw_config: str | None, stdin: str, now: float | None = None) -> str:
    """Print the status line at once, then report the reading when due. Never raises."""
    now = time.time() if now is None else now
    try:
        data = load_json(stdin, PARSE_DEPTH) if stdin.strip() else {}
    except ValueError:
        data = {}
    if not isinstance(data, dict):
        data = {}
    try:
        config = load_config(config_path(raw_config))
    except ConfigError as exc:
        line = f"pocolobby: {exc}"
        print(line, flush=True)
        return line
    line = status_text(config.agent, data, now)
    print(line, flush=True)
    with contextlib.suppress(Exception):
        _report_usage(config, data, now)
    return line


def _report_usage(config: AgentConfig, data: JSONObject, now: float) -> None:
    limits = data.get("rate_limits")
    if not isinstance(limits, dict):
        return
    five, week = _window(limits.get("five_hour")), _window(limits.get("seven_day"))
    if five is None or week is None:
        return
    path = _state_path(config)
    state = _read_state(path)
    if now - _seconds(state.get("email_checked_at")) >= EMAIL_SECONDS:
        state["email"] = claude_account_email()
        state["email_checked_at"] = now
        _write_state(path, state)
    reading: JSONObject = {
        "five_hour": {"used_percentage": five.used, "resets_at": five.resets_at},
        "seven_day": {"used_percentage": week.used, "resets_at": week.resets_at},
    }
    if state.get("email"):
        reading["account_email"] = state["email"]
    due = reading != state.get("sent") or now - _seconds(state.get("sent_at")) >= RESEND_SECONDS
    if not due:
        return
    if _send(config, "PUT", "usage", reading, NETWORK_TIMEOUT) == 200:
        state["sent"], state["sent_at"] = reading, now
        _write_state(path, state)


def _seconds(value: JSONValue) -> float:
    """A time this module wrote into its state file; 0 (long ago) if it is missing."""
    return float(value) if isinstance(value, int | float) else 0.0


# ---------------------------------------------------------------- transcripts


@dataclass
class DayTotals:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_creation_tokens: int = 0


def _lines(path: Path) -> Iterator[JSONObject]:
    try:
        with path.open(encoding="utf-8", errors="replace") as handle:
            for raw in handle:
                try:
                    entry = load_json(raw, PARSE_DEPTH)
                except ValueError:
                    continue
                if isinstance(entry, dict):
                    yield entry
    except OSError:
        return


def transcript_files(transcript: Path, session_id: str) -> list[Path]:
    """The session's transcript and its subagents' (`<dir>/<session>/subagents/*.jsonl`)."""
    files = [transcript]
    subagents = transcript.parent / session_id / "subagents"
    if subagents.is_dir():
        files += sorted(subagents.glob("*.jsonl"))
    return files


def _count(value: JSONValue) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def token_days(files: Iterable[Path]) -> dict[str, DayTotals]:
    """Daily totals (UTC day of each response) from assistant usage, one count per message id.

    A response spans several transcript lines that repeat its usage; the last line of an id
    wins, on the day its first line was written.
    """
    usage_of: dict[str, JSONObject] = {}
    day_of: dict[str, str] = {}
    anonymous = 0
    for path in files:
        for entry in _lines(path):
            message = entry.get("message")
            if entry.get("type") != "assistant" or not isinstance(message, dict):
                continue
            usage = message.get("usage")
            stamp = entry.get("timestamp")
            if not isinstance(usage, dict) or not isinstance(stamp, str):
                continue
            try:
                day = (
                    datetime.fromisoformat(stamp.replace("Z", "+00:00"))
                    .astimezone(UTC)
                    .date()
                    .isoformat()
                )
            except ValueError:
                continue
            key = message.get("id")
            if not isinstance(key, str) or not key:
                anonymous += 1
                key = f"\0{anonymous}"
            usage_of[key] = usage
            day_of.setdefault(key, day)
    totals: dict[str, DayTotals] = {}
    for key, usage in usage_of.items():
        of_day = totals.setdefault(day_of[key], DayTotals())
        of_day.input_tokens += _count(usage.get("input_tokens"))
        of_day.output_tokens += _count(usage.get("output_tokens"))
        of_day.cache_read_tokens += _count(usage.get("cache_read_input_tokens"))
        of_day.cache_creation_tokens += _count(usage.get("cache_creation_input_tokens"))
    return totals


def tokens_body(session_id: str, totals: dict[str, DayTotals]) -> JSONObject:
    return {
        "days": [
            {
                "day": day,
                "session_id": session_id,
                "input_tokens": t.input_tokens,
                "output_tokens": t.output_tokens,
                "cache_read_tokens": t.cache_read_tokens,
                "cache_creation_tokens": t.cache_creation_tokens,
            }
            for day, t in sorted(totals.items())[-400:]
        ]
    }


def _session_id(raw: JSONValue, transcript: Path | None) -> str:
    value = raw if isinstance(raw, str) and raw else (transcript.stem if transcript else "")
    return "".join(c for c in value if c.isalnum() or c in "._:-")[:100]


# ---------------------------------------------------------------- hooks


def hook(raw_config: str | None, stdin: str) -> int:
    """UserPromptSubmit -> a turn starts; Stop -> it ends and the token counts go out.

    Prints nothing on stdout (UserPromptSubmit's stdout would become context) and exits 0.
    """
    with contextlib.suppress(Exception):
        data = json.loads(stdin)
        if not isinstance(data, dict):
            return 0
        config = load_config(config_path(raw_config))
        event = data.get("hook_event_name")
        session = data.get("session_id")
        session = session if isinstance(session, str) else ""
        if event == "UserPromptSubmit":
            record_turn(config, "start", session, time.time())  # the bridge reads it
            _send(
                config, "POST", "turns", {"event": "start", "host": "claude-code"}, NETWORK_TIMEOUT
            )
        elif event == "Stop":
            record_turn(config, "end", session, time.time())
            _send(config, "POST", "turns", {"event": "end", "host": "claude-code"}, NETWORK_TIMEOUT)
            raw_path = data.get("transcript_path")
            if isinstance(raw_path, str) and raw_path:
                transcript = Path(raw_path).expanduser()
                session = _session_id(data.get("session_id"), transcript)
                totals = token_days(transcript_files(transcript, session))
                if session and totals:
                    _send(config, "PUT", "tokens", tokens_body(session, totals), NETWORK_TIMEOUT)
    return 0


def send_tokens(raw_config: str | None, transcripts: list[str]) -> int:
    """`pocolobby tokens`: send the counts of transcripts by hand (a backfill); prints them."""
    try:
        config = load_config(config_path(raw_config))
    except ConfigError as exc:
        print(f"pocolobby: {exc}", file=sys.stderr)
        return 1
    failed = 0
    for raw in transcripts:
        transcript = Path(raw).expanduser()
        if not transcript.is_file():
            print(f"pocolobby: no transcript at {transcript}", file=sys.stderr)
            failed += 1
            continue
        session = _session_id(None, transcript)
        totals = token_days(transcript_files(transcript, session))
        if not totals:
            print(f"{session}: no assistant usage in {transcript}")
            continue
        status = _send(config, "PUT", "tokens", tokens_body(session, totals), 10.0)
        for day, t in sorted(totals.items()):
            print(
                f"{session} {day}: input {t.input_tokens}, output {t.output_tokens}, "
                f"cache read {t.cache_read_tokens}, cache write {t.cache_creation_tokens}"
            )
        if status != 200:
            print(f"pocolobby: the broker did not take {session} (HTTP {status})", file=sys.stderr)
            failed += 1
    return 1 if failed else 0
