"""Real Claude Code (from the npm registry) driven offline: a loopback stand-in for the
Anthropic Messages API, a throwaway HOME that skips onboarding, and sessions in tmux panes.

Not a test module; it imports neither pytest nor Django, so the benchmark shares it
(`benchmarks/claude_sessions.py`). The stand-in speaks the real wire format: `POST
/v1/messages` answered as an SSE stream (`message_start`, `content_block_start`/`_delta`/
`_stop`, `message_delta`, `message_stop`) or as one JSON message, with `tool_use` blocks. Its
"model" is a script: when the conversation shows a pocolobby bootstrap event and has not
called `get_context` yet it calls it, then `ready` with that bootstrap's nonce, then says so.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from pocolobby.bridge.connect import claude_project_key
from tests.bridge.npm_hosts import terminal_env
from tests.eventually import eventually
from tests.server import REPO_ROOT, AgentConfig, Broker, clean_env

CLAUDE_VERSION_SPEC = "@anthropic-ai/claude-code@2"
API_KEY = "sk-ant-api03-" + "x" * 80 + "-standinAA"
SERVER = "pocolobby"
TOOL_PREFIX = f"mcp__{SERVER}__"
NONCE = re.compile(r'"nonce":\s*"([0-9a-f]+)"')
# What a refused session's channel event starts with (pocolobby.bridge.core.Bridge.on_stop).
REFUSAL_EVENT = "PocoLobby bridge: not connected"
SESSION_HEADER = "x-claude-code-session-id"
PROMPT = "\u276f"  # the input prompt's mark


def claude_executable() -> str | None:
    """Claude Code's `claude`: $POCOLOBBY_CLAUDE, then PATH, then /opt/claude-code's install."""
    named = os.environ.get("POCOLOBBY_CLAUDE")
    if named:
        return named if os.access(named, os.X_OK) else None
    found = shutil.which("claude")
    if found:
        return found
    default = Path("/opt/claude-code/node_modules/.bin/claude")
    return str(default) if os.access(default, os.X_OK) else None


def why_unavailable() -> str | None:
    """Why real Claude Code cannot run here, or None when it can."""
    if shutil.which("tmux") is None:
        return "tmux is not installed"
    if claude_executable() is None:
        return (
            "Claude Code is not installed: `npm install --prefix /opt/claude-code "
            f"{CLAUDE_VERSION_SPEC}` (needs node and npm), or set POCOLOBBY_CLAUDE"
        )
    return None


def broker_admits_after_a_clean_end() -> bool:
    """Whether this checkout's broker admits a new conversation once the previous one ended
    cleanly, with a hand over for a waiting one (issue 27's broker side): its CLI has
    `agent hand-over`."""
    result = subprocess.run(
        [sys.executable, "-m", "pocolobby", "agent", "--help"],
        cwd=REPO_ROOT,
        env=clean_env(),
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    return "hand-over" in result.stdout


# ------------------------------------------------------------------ the Messages API stand-in


def _text(content: Any) -> str:
    """All text of one message's content (a string or blocks, tool results included)."""
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for block in content if isinstance(content, list) else []:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text":
            parts.append(str(block.get("text", "")))
        elif block.get("type") == "tool_result":
            parts.append(_text(block.get("content", "")))
    return "\n".join(parts)


def _tool_results(content: Any) -> list[str]:
    blocks = content if isinstance(content, list) else []
    return [
        _text(b.get("content", ""))
        for b in blocks
        if isinstance(b, dict) and b.get("type") == "tool_result"
    ]


def _tool_uses(messages: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    found: list[tuple[str, dict[str, Any]]] = []
    for message in messages:
        content = message.get("content")
        if message.get("role") != "assistant" or not isinstance(content, list):
            continue
        for block in content:
            if isinstance(block, dict) and block.get("type") == "tool_use":
                found.append((str(block.get("name")), dict(block.get("input") or {})))
    return found


@dataclass
class Turn:
    """One answered request, as the tests read it."""

    tools: list[str]
    last_user_text: str
    answer: list[dict[str, Any]]
    # Claude Code names its conversation in a request header.
    session_id: str | None = None
    # The texts of the tool results the last user message carries.
    tool_results: list[str] = field(default_factory=list)


def decide(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The scripted model: the content blocks to answer `body` with.

    It acts on the latest bootstrap event of the conversation (a resumed conversation holds
    earlier ones): get_context if it has not been called since that event, then ready with
    its nonce, then a sentence. On a refusal event it calls get_context to learn why.
    """
    messages = [m for m in body.get("messages", []) if isinstance(m, dict)]
    tools = {t.get("name") for t in body.get("tools", []) if isinstance(t, dict)}
    texts = [_text(m.get("content")) if m.get("role") == "user" else "" for m in messages]
    offered = [i for i, text in enumerate(texts) if "PocoLobby bootstrap" in text]
    if offered and f"{TOOL_PREFIX}get_context" in tools:
        latest = offered[-1]
        nonce = NONCE.findall(texts[latest])[-1]
        since = [name for name, _ in _tool_uses(messages[latest:])]
        echoed = [a.get("nonce") for name, a in _tool_uses(messages) if name.endswith("ready")]
        if nonce not in echoed:
            if f"{TOOL_PREFIX}get_context" not in since:
                return [_tool_use("get_context", {})]
            return [_tool_use("ready", {"nonce": nonce})]
        if f"{TOOL_PREFIX}ready" in since:
            return [{"type": "text", "text": f"Bootstrap confirmed with nonce {nonce}."}]
    refused = [i for i, text in enumerate(texts) if REFUSAL_EVENT in text]
    if refused and f"{TOOL_PREFIX}get_context" in tools:
        since = [name for name, _ in _tool_uses(messages[refused[-1] :])]
        if f"{TOOL_PREFIX}get_context" not in since:  # as its description says: learn why
            return [_tool_use("get_context", {})]
        return [{"type": "text", "text": "This session is not connected to PocoLobby."}]
    return [{"type": "text", "text": "OK."}]


def _tool_use(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "tool_use",
        "id": "toolu_" + uuid.uuid4().hex[:24],
        "name": TOOL_PREFIX + name,
        "input": arguments,
    }


def _sse(event: str, data: dict[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


def stream_events(model: str, blocks: list[dict[str, Any]]) -> Iterator[bytes]:
    """The Messages API's streaming events for one answer made of `blocks`."""
    message_id = "msg_" + uuid.uuid4().hex[:24]
    usage = {"input_tokens": 10, "output_tokens": 1}
    yield _sse(
        "message_start",
        {
            "type": "message_start",
            "message": {
                "id": message_id,
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": usage,
            },
        },
    )
    for index, block in enumerate(blocks):
        if block["type"] == "text":
            start: dict[str, Any] = {"type": "text", "text": ""}
            delta = {"type": "text_delta", "text": block["text"]}
        else:
            start = {**block, "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        yield _sse(
            "content_block_start",
            {"type": "content_block_start", "index": index, "content_block": start},
        )
        yield _sse(
            "content_block_delta",
            {"type": "content_block_delta", "index": index, "delta": delta},
        )
        yield _sse("content_block_stop", {"type": "content_block_stop", "index": index})
    stop = "tool_use" if any(b["type"] == "tool_use" for b in blocks) else "end_turn"
    yield _sse(
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop, "stop_sequence": None},
            "usage": {"output_tokens": 5},
        },
    )
    yield _sse("message_stop", {"type": "message_stop"})


class MessagesAPI:
    """A loopback HTTP server answering like api.anthropic.com, with the scripted model."""

    def __init__(self, decide_with: Callable[[dict[str, Any]], list[dict[str, Any]]] = decide):
        self.decide = decide_with
        self.turns: list[Turn] = []
        self.lock = threading.Lock()
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return None

            def _json(self, status: int, data: dict[str, Any]) -> None:
                raw = json.dumps(data).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def do_GET(self) -> None:
                self._json(200, {"data": [], "has_more": False})

            def do_HEAD(self) -> None:
                self.send_response(200)
                self.send_header("content-length", "0")
                self.end_headers()

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                try:
                    body = json.loads(self.rfile.read(length) or b"{}")
                except ValueError:
                    body = {}
                path = self.path.split("?", 1)[0]
                if path.endswith("/count_tokens"):
                    self._json(200, {"input_tokens": 10})
                    return
                if not path.endswith("/v1/messages"):
                    self._json(200, {})
                    return
                api.answer(self, body, self.headers.get(SESSION_HEADER))

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def answer(
        self, handler: BaseHTTPRequestHandler, body: dict[str, Any], session_id: str | None
    ) -> None:
        blocks = self.decide(body)
        messages = [m for m in body.get("messages", []) if isinstance(m, dict)]
        users = [m for m in messages if m.get("role") == "user"]
        turn = Turn(
            tools=[str(t.get("name")) for t in body.get("tools", []) if isinstance(t, dict)],
            last_user_text=_text(users[-1].get("content")) if users else "",
            answer=blocks,
            session_id=session_id,
            tool_results=_tool_results(users[-1].get("content")) if users else [],
        )
        with self.lock:
            self.turns.append(turn)
        model = str(body.get("model") or "claude-sonnet-4-5")
        if body.get("stream"):
            handler.send_response(200)
            handler.send_header("content-type", "text/event-stream")
            handler.send_header("cache-control", "no-cache")
            handler.send_header("connection", "close")
            handler.end_headers()
            for chunk in stream_events(model, blocks):
                handler.wfile.write(chunk)
                handler.wfile.flush()
            handler.close_connection = True
            return
        stop = "tool_use" if any(b["type"] == "tool_use" for b in blocks) else "end_turn"
        raw = json.dumps(
            {
                "id": "msg_" + uuid.uuid4().hex[:24],
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": blocks,
                "stop_reason": stop,
                "stop_sequence": None,
                "usage": {"input_tokens": 10, "output_tokens": 5},
            }
        ).encode()
        handler.send_response(200)
        handler.send_header("content-type", "application/json")
        handler.send_header("content-length", str(len(raw)))
        handler.end_headers()
        handler.wfile.write(raw)

    def start(self) -> MessagesAPI:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def calls(self, tool: str) -> list[Turn]:
        """Turns whose answer called `tool` (the bridge's name, without the mcp prefix)."""
        with self.lock:
            return [
                t for t in self.turns if any(b.get("name") == TOOL_PREFIX + tool for b in t.answer)
            ]

    def of(self, session_id: str, since: int = 0) -> list[Turn]:
        """The turns of one conversation, from the `since`th turn of all (a resumed
        conversation keeps its id: `since` tells its runs apart)."""
        with self.lock:
            return [t for t in self.turns[since:] if t.session_id == session_id]

    def confirmed(self, session_id: str, since: int = 0) -> list[str]:
        """The nonces `ready` confirmed in `session_id` (the broker answered ready: true)."""
        turns = self.of(session_id, since)
        nonces = []
        for turn in turns:
            if any('"ready":true' in r.replace(" ", "") for r in turn.tool_results):
                for block in turn.answer:
                    if block.get("type") == "text":
                        nonces.extend(re.findall(r"nonce ([0-9a-f]+)", block["text"]))
        return nonces


# ------------------------------------------------------------------ Claude Code itself


def write_claude_home(home: Path, project: Path) -> None:
    """A throwaway HOME where Claude Code starts straight into its prompt: onboarding done,
    the stand-in's key approved, the project trusted (`connect` then adds its local-scope
    server to this state), the bridge's tools allowed, and the channels feature on.

    Claude Code reads the channels gate (`tengu_harbor`) from its cached feature flags, and
    only when nonessential traffic is allowed: CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC,
    DISABLE_TELEMETRY or DO_NOT_TRACK turn channels off ("Channels are not currently
    available"). So the sessions run without them; on a closed network that traffic fails.
    """
    (home / ".claude").mkdir(parents=True, exist_ok=True)
    state = {
        "hasCompletedOnboarding": True,
        "lastOnboardingVersion": "2.1.197",
        "numStartups": 5,
        "customApiKeyResponses": {"approved": [API_KEY[-20:]], "rejected": []},
        "cachedGrowthBookFeatures": {"tengu_harbor": True},
        "projects": {
            claude_project_key(project): {
                "hasTrustDialogAccepted": True,
                "hasCompletedProjectOnboarding": True,
                "enabledMcpjsonServers": [SERVER],
                "allowedTools": [],
            }
        },
    }
    (home / ".claude.json").write_text(json.dumps(state, indent=2))
    settings = {"enableAllProjectMcpServers": True, "permissions": {"allow": [f"mcp__{SERVER}"]}}
    (home / ".claude" / "settings.json").write_text(json.dumps(settings))


def tap_the_bridge(home: Path, project: Path, tap_log: Path) -> None:
    """Put the stdio tap in front of the bridge `pocolobby connect` registered (in Claude
    Code's local scope for the project), verbose."""
    path = home / ".claude.json"
    data = json.loads(path.read_text())
    entry = data["projects"][claude_project_key(project)]["mcpServers"][SERVER]
    tap = Path(__file__).with_name("stdio_tap.py")
    entry["args"] = [str(tap), str(tap_log), "--", entry["command"], *entry["args"], "--verbose"]
    entry["command"] = sys.executable
    path.write_text(json.dumps(data, indent=2))


@dataclass
class Workspace:
    """One project directory connected to one agent, a HOME, a tmux server and the API."""

    root: Path
    api: MessagesAPI
    broker: Broker
    config: AgentConfig
    claude: str
    sessions: list[ClaudeSession] = field(default_factory=list)

    @property
    def home(self) -> Path:
        return self.root / "home"

    @property
    def project(self) -> Path:
        return self.root / "project"

    @property
    def socket(self) -> Path:
        return self.root / "tmux.sock"

    @property
    def tap_log(self) -> Path:
        return self.root / "stdio-tap.log"

    @classmethod
    def create(cls, root: Path, api: MessagesAPI, broker: Broker, config: AgentConfig) -> Workspace:
        claude = claude_executable()
        if claude is None:
            raise RuntimeError(why_unavailable() or "Claude Code is not installed")
        workspace = cls(root.resolve(), api, broker, config, claude)
        workspace.project.mkdir(parents=True, exist_ok=True)
        write_claude_home(workspace.home, workspace.project)
        # The real `pocolobby connect`, as a user runs it in the project: the entry goes to
        # Claude Code's local scope in this HOME, merged into the state written above.
        connected = broker.cli(
            "connect", "--config", str(config.path), cwd=workspace.project,
            env={"HOME": str(workspace.home)},
        )  # fmt: skip
        if connected.returncode != 0:
            raise RuntimeError(f"pocolobby connect failed: {connected.stderr or connected.stdout}")
        tap_the_bridge(workspace.home, workspace.project, workspace.tap_log)
        return workspace

    def env(self) -> dict[str, str]:
        extra = {
            "HOME": str(self.home),
            "ANTHROPIC_BASE_URL": self.api.url,
            "ANTHROPIC_API_KEY": API_KEY,
            "DISABLE_AUTOUPDATER": "1",
            "TERM": "xterm-256color",
        }
        env = terminal_env(clean_env(extra))
        for name in (
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC",
            "DISABLE_TELEMETRY",
            "DO_NOT_TRACK",
        ):
            env.pop(name, None)
        for name in [n for n in env if n.startswith(("CLAUDE_CODE_", "CLAUDECODE", "TMUX"))]:
            env.pop(name, None)
        return env

    def tmux(self, *args: str) -> str:
        return subprocess.run(
            ["tmux", "-S", str(self.socket), *args],
            capture_output=True,
            text=True,
            timeout=15,
            check=False,
        ).stdout

    def session(self, name: str, *, resume: str | None = None) -> ClaudeSession:
        """A new session (a fresh conversation, or `--resume` of `resume`); not started."""
        session = ClaudeSession(self, name, resume or str(uuid.uuid4()), resume is not None)
        self.sessions.append(session)
        return session

    def claude_cli(self, *args: str, timeout: float = 90.0) -> subprocess.CompletedProcess[str]:
        """`claude ARGS` run in the project, e.g. `mcp list`."""
        return subprocess.run(
            [self.claude, *args],
            cwd=self.project,
            env=self.env(),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def close(self) -> None:
        for session in self.sessions:
            session.kill()
        self.tmux("kill-server")


@dataclass
class ClaudeSession:
    """One `claude` in its own tmux window, with its own debug log."""

    workspace: Workspace
    name: str
    session_id: str
    resumed: bool
    started_at: float = 0.0
    first_turn: int = 0  # the stand-in's turn count when this run started

    @property
    def debug_log(self) -> Path:
        return self.workspace.root / f"debug-{self.name}.log"

    def start(self, timeout: float = 60.0) -> ClaudeSession:
        ws = self.workspace
        chosen = (
            ["--resume", self.session_id] if self.resumed else ["--session-id", self.session_id]
        )
        command = [
            ws.claude,
            "--dangerously-load-development-channels",
            f"server:{SERVER}",
            "--debug-file",
            str(self.debug_log),
            *chosen,
        ]
        env_args = [f"{k}={v}" for k, v in ws.env().items()]
        shell = "exec env -i " + " ".join(shlex.quote(a) for a in [*env_args, *command])
        if not self._server_up():  # a placeholder window keeps the tmux server up between runs
            ws.tmux(
                "new-session",
                "-d",
                "-s",
                "main",
                "-x",
                "220",
                "-y",
                "50",
                "-c",
                str(ws.project),
                "sleep 100000",
            )
        ws.tmux("new-window", "-d", "-t", "main", "-n", self.name, "-c", str(ws.project), shell)
        self.started_at = time.time()
        with ws.api.lock:
            self.first_turn = len(ws.api.turns)
        # The development-channels warning asks once per start; accept it.
        self.wait_for_screen(lambda s: "local development" in s or PROMPT in s, timeout)
        if "local development" in self.screen():
            self.keys("Enter")
        return self

    def _server_up(self) -> bool:
        return "main" in self.workspace.tmux("list-sessions", "-F", "#{session_name}").split()

    @property
    def target(self) -> str:
        return f"main:{self.name}"

    def keys(self, *keys: str) -> None:
        self.workspace.tmux("send-keys", "-t", self.target, *keys)

    def type(self, text: str) -> None:
        self.workspace.tmux("send-keys", "-t", self.target, "-l", text)
        time.sleep(0.3)
        self.keys("Enter")

    def screen(self) -> str:
        return self.workspace.tmux("capture-pane", "-p", "-J", "-t", self.target, "-S", "-200")

    def alive(self) -> bool:
        return (
            self.name
            in self.workspace.tmux("list-windows", "-t", "main", "-F", "#{window_name}").split()
        )

    def wait_for_screen(self, predicate: Callable[[str], bool], timeout: float = 60.0) -> str:
        """The screen once `predicate` holds for it."""
        return eventually(
            lambda: text if predicate(text := self.screen()) else None,
            timeout=timeout,
            every=0.25,
            what=lambda: f"{self.name}: the screen matching; it shows:\n{self.screen()}",
        )

    def wait_ready(self, timeout: float = 60.0) -> str:
        """The nonce this session's `ready` confirmed (the broker answered ready: true)."""
        confirmed = eventually(
            lambda: (
                self.workspace.api.confirmed(self.session_id, self.first_turn) or not self.alive()
            ),  # gone: waiting longer shows nothing more
            timeout=timeout,
            every=0.25,
            what=lambda: f"{self.name} confirming a bootstrap",
        )
        if confirmed is True:
            raise AssertionError(
                f"{self.name} ended before it confirmed a bootstrap; its screen:\n"
                f"{self.screen()}\nits debug log's channel lines:\n{self.channel_lines()}"
            )
        return confirmed[-1]

    def channel_lines(self) -> str:
        try:
            text = self.debug_log.read_text(errors="replace")
        except FileNotFoundError:
            return "(no debug log)"
        lines = [ln for ln in text.splitlines() if f'"{SERVER}"' in ln]
        return "\n".join(ln[:240] for ln in lines)

    def quit(self, timeout: float = 30.0) -> None:
        """`/exit`, as a user quits: Claude Code ends its MCP servers (SIGINT, then SIGTERM)."""
        if not self.alive():
            return
        self.keys("Escape")
        self.type("/exit")
        eventually(
            lambda: not self.alive(),
            timeout=timeout,
            every=0.2,
            what=lambda: f"{self.name} quitting; its screen:\n{self.screen()}",
        )

    def kill(self) -> None:
        if self.alive():
            self.workspace.tmux("kill-window", "-t", self.target)
