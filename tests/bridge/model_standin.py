"""A loopback stand-in for the model APIs behind Codex CLI and Gemini CLI, run as a script:

    python tests/bridge/model_standin.py LOG_DIR   (prints the port it listens on)

It speaks their real wire formats: OpenAI's Responses API (`POST /v1/responses`, streamed as
server-sent events) for Codex CLI through a custom `model_providers` entry, and the Gemini API
(`POST /v1beta/models/M:streamGenerateContent?alt=sse`, `:generateContent`, `:countTokens`)
for Gemini CLI through GOOGLE_GEMINI_BASE_URL. Its "model" is a script keyed on the turn's
last user text:

- a PocoLobby bootstrap line: call get_context, then ready with the nonce, then say done;
- a PocoLobby message line: call get_messages, then acknowledge_messages with its ids;
- `work N`: stream a reply slowly for N seconds (the host is mid-turn);
- `approve`: ask the host to run a shell command (the host's approval prompt);
- anything else: a one-line answer.

Every request and every tool call it makes is appended to LOG_DIR/requests.jsonl and
LOG_DIR/calls.jsonl with the time, for the tests' checks and latency figures.
"""

from __future__ import annotations

import json
import os
import re
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

LOG = Path(".")
DEBUG = bool(os.environ.get("STANDIN_DEBUG"))
_lock = threading.Lock()


def log(name: str, record: dict[str, Any]) -> None:
    with _lock, (LOG / name).open("a") as handle:
        handle.write(json.dumps({"t": time.time(), **record}) + "\n")


def decide(user_text: str, called: list[tuple[str, str]], tools: list[str]) -> dict[str, Any]:
    """The next step of the scripted model: {"call": tool, "args": {...}}, {"text": ...},
    or {"work": seconds}. `called` is the turn's (tool, result text) so far."""

    def tool(suffix: str) -> str:
        return next((t for t in tools if t.endswith(("/" + suffix, "_" + suffix))), suffix)

    done = [name for name, _ in called]
    if not tools:  # a host's side request (Codex CLI titles a thread): plain text only
        return {"text": "Lobby notice"}
    if "# pocolobby:" in user_text and "bootstrap" in user_text:
        nonce = re.search(r"nonce ([A-Za-z0-9_-]+)", user_text)
        if not any(n.endswith("get_context") for n in done):
            return {"call": tool("get_context"), "args": {}}
        if nonce and not any(n.endswith("__ready") or n == "ready" for n in done):
            return {"call": tool("ready"), "args": {"nonce": nonce.group(1)}}
        return {"text": "Bootstrapped."}
    ids = re.search(r"# pocolobby:.* ids ([0-9,]+)", user_text)
    if ids:
        message_ids = [int(i) for i in ids.group(1).split(",")]
        if not any(n.endswith("get_messages") for n in done):
            return {"call": tool("get_messages"), "args": {}}
        if not any(n.endswith("acknowledge_messages") for n in done):
            return {"call": tool("acknowledge_messages"), "args": {"message_ids": message_ids}}
        return {"text": f"Handled messages {ids.group(1)}."}
    work = re.search(r"\bwork ([0-9.]+)", user_text)
    if work and not called:
        return {"work": float(work.group(1))}
    if "approve" in user_text and not called:
        # A call the host asks its owner about: Codex CLI asks for an MCP tool not approved
        # in its config (list_agents), Gemini CLI for a shell command.
        return {"shell": "touch approved-by-owner", "call": tool("list_agents"), "args": {}}
    return {"text": "OK."}


# ------------------------------------------------------------------ OpenAI Responses (Codex)


def responses_turn(body: dict[str, Any]) -> tuple[str, list[tuple[str, str]], list[str]]:
    """The last user text, the tool calls after it, and the offered tool names."""
    user_text, called, names = "", [], {}
    for item in body.get("input", []):
        kind = item.get("type", "message")
        if kind == "message" and item.get("role") == "user":
            parts = item.get("content", [])
            text = " ".join(p.get("text", "") for p in parts if isinstance(p, dict))
            if "<environment_context>" in text or text.startswith("# AGENTS.md"):
                continue
            user_text, called = text, []
        elif kind in ("function_call", "custom_tool_call"):
            names[item.get("call_id")] = item.get("name", "")
        elif kind in ("function_call_output", "custom_tool_call_output"):
            output = item.get("output")
            called.append((names.get(item.get("call_id"), ""), json.dumps(output)))
    tools = []
    for tool in body.get("tools", []):
        if tool.get("type") == "namespace":  # Codex groups each MCP server's tools
            tools += [f"{tool['name']}/{t.get('name', '')}" for t in tool.get("tools", [])]
        else:
            tools.append(tool.get("name", ""))
    return user_text, called, tools


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:  # quiet
        pass

    def _body(self) -> dict[str, Any]:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        return json.loads(raw or b"{}")

    def _start_sse(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True

    def _event(self, data: dict[str, Any], name: str | None = None) -> None:
        head = f"event: {name}\n" if name else ""
        self.wfile.write(f"{head}data: {json.dumps(data)}\n\n".encode())
        self.wfile.flush()

    def _json(self, data: dict[str, Any], status: int = 200) -> None:
        raw = json.dumps(data).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def do_GET(self) -> None:
        log("requests.jsonl", {"method": "GET", "path": self.path})
        if self.path.rstrip("/").endswith("/models"):
            self._json({"object": "list", "data": [{"id": "stand-in", "object": "model"}]})
            return
        self._json({"error": {"message": "not here"}}, 404)

    def do_POST(self) -> None:
        body = self._body()
        if DEBUG:
            log("bodies.jsonl", {"path": self.path, "headers": dict(self.headers), "body": body})
        path = self.path.split("?")[0]
        if path.endswith("/responses"):
            self.openai_responses(body)
        elif ":streamGenerateContent" in path:
            self.gemini(body, stream=True)
        elif ":generateContent" in path:
            self.gemini(body, stream=False)
        elif ":countTokens" in path:
            log("requests.jsonl", {"method": "POST", "path": path})
            self._json({"totalTokens": 10})
        else:
            log("requests.jsonl", {"method": "POST", "path": path, "body": body})
            self._json({"error": {"message": f"no {path} here"}}, 404)

    # --------------------------------------------------------------- Codex: Responses API

    def openai_responses(self, body: dict[str, Any]) -> None:
        user_text, called, tools = responses_turn(body)
        step = decide(user_text, called, tools)
        log(
            "requests.jsonl",
            {"api": "responses", "user": user_text, "step": step, "tools": tools,
             "results": [r[:300] for _, r in called]},
        )  # fmt: skip
        response_id = f"resp_{uuid.uuid4().hex[:12]}"
        base = {"id": response_id, "object": "response", "model": body.get("model", "stand-in")}
        self._start_sse()
        self._event({"type": "response.created", "response": {**base, "status": "in_progress"}})
        if "call" in step or "shell" in step:
            call_id = f"call_{uuid.uuid4().hex[:12]}"
            if "call" in step:
                name, args = step["call"], step["args"]
                log("calls.jsonl", {"tool": name, "args": args, "user": user_text})
            else:
                name = next((t for t in tools if t in ("shell", "exec_command")), "shell")
                command = ["bash", "-lc", step["shell"]]
                args = {"cmd": step["shell"]} if name == "exec_command" else {"command": command}
            namespace, _, bare = name.rpartition("/")
            item = {
                "type": "function_call",
                "id": f"fc_{uuid.uuid4().hex[:12]}",
                "call_id": call_id,
                "name": bare,
                **({"namespace": namespace} if namespace else {}),
                "arguments": json.dumps(args),
                "status": "completed",
            }
            self._event({"type": "response.output_item.added", "output_index": 0, "item": item})
            self._event({"type": "response.output_item.done", "output_index": 0, "item": item})
        else:
            self._text_events(step)
        usage = {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15}
        self._event(
            {
                "type": "response.completed",
                "response": {**base, "status": "completed", "usage": usage},
            }
        )

    def _text_events(self, step: dict[str, Any]) -> None:
        message_id = f"msg_{uuid.uuid4().hex[:12]}"
        chunks = self._chunks(step)
        item = {"type": "message", "id": message_id, "role": "assistant", "content": []}
        self._event({"type": "response.output_item.added", "output_index": 0, "item": item})
        for chunk in chunks:
            self._event(
                {
                    "type": "response.output_text.delta",
                    "item_id": message_id,
                    "output_index": 0,
                    "content_index": 0,
                    "delta": chunk,
                }
            )
        text = "".join(chunks)
        done = {**item, "content": [{"type": "output_text", "text": text, "annotations": []}]}
        self._event({"type": "response.output_item.done", "output_index": 0, "item": done})

    @staticmethod
    def _chunks(step: dict[str, Any]):  # type: ignore[no-untyped-def]
        """The reply's pieces; with `work`, one every 0.5 s for that long (mid-turn)."""
        if "work" not in step:
            yield step["text"]
            return
        end = time.monotonic() + step["work"]
        n = 0
        while time.monotonic() < end:
            n += 1
            yield f"step {n}. "
            time.sleep(0.5)
        yield "Worked."

    # ---------------------------------------------------------------- Gemini API

    def gemini(self, body: dict[str, Any], stream: bool) -> None:
        user_text, called = "", []
        for content in body.get("contents", []):
            for part in content.get("parts", []):
                if content.get("role") == "user" and "text" in part:
                    user_text, called = part["text"], []
                elif "functionResponse" in part:
                    response = part["functionResponse"]
                    called.append((response.get("name", ""), json.dumps(response)))
        tools = [
            f.get("name", "")
            for t in body.get("tools", [])
            for f in t.get("functionDeclarations", [])
        ]
        config = body.get("generationConfig") or {}
        if not stream or config.get("responseMimeType") == "application/json":
            # Gemini CLI's own side requests (routing, next-speaker checks): a short JSON answer.
            log("requests.jsonl", {"api": "gemini-side", "user": user_text[-200:]})
            answer = {"reasoning": "stand-in", "model_choice": "flash", "next_speaker": "user"}
            text = json.dumps(answer)
            self._json(self._candidate([{"text": text}]))
            return
        step = decide(user_text, called, tools)
        log(
            "requests.jsonl",
            {"api": "gemini", "user": user_text, "step": step,
             "results": [r[:300] for _, r in called]},
        )  # fmt: skip
        self._start_sse()
        if "call" in step and "shell" not in step:
            log("calls.jsonl", {"tool": step["call"], "args": step["args"], "user": user_text})
            part = {"functionCall": {"name": step["call"], "args": step["args"]}}
            self._event(self._candidate([part]))
        elif "shell" in step:
            name = next((t for t in tools if "shell" in t), "run_shell_command")
            args = {"command": step["shell"], "description": "touch a file"}
            self._event(self._candidate([{"functionCall": {"name": name, "args": args}}]))
        else:
            for chunk in self._chunks(step):
                self._event(self._candidate([{"text": chunk}], finish=False))
            self._event(self._candidate([{"text": ""}]))

    @staticmethod
    def _candidate(parts: list[dict[str, Any]], finish: bool = True) -> dict[str, Any]:
        candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
        if finish:
            candidate["finishReason"] = "STOP"
        return {
            "candidates": [candidate],
            "usageMetadata": {
                "promptTokenCount": 10,
                "candidatesTokenCount": 5,
                "totalTokenCount": 15,
            },
            "modelVersion": "stand-in",
        }


def main() -> None:
    global LOG
    LOG = Path(sys.argv[1])
    LOG.mkdir(parents=True, exist_ok=True)
    port = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
