"""Fakes at the edge of the world for the dashboard's notes and summaries.

`FakeGitHub` answers GitHub's REST routes (commits with ETags and 304s, recursive trees,
base64 blobs) in GitHub's own JSON shapes; `FakeClaude` answers the Messages API the way
Anthropic does. Both sit on a respx router, so the real httpx clients (ours and the
anthropic SDK's) go through their ordinary code paths. `MessagesStandIn` answers the same
wire format on a loopback port, for broker processes: it counts requests and can hold one
open.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import respx

GITHUB = "https://api.github.test"
ANTHROPIC = "https://api.anthropic.test"
REPOSITORY = "team/notes"


def git_blob_sha(content: str) -> str:
    """The SHA Git itself gives a blob, so reuse by SHA behaves as it does on GitHub."""
    raw = content.encode("utf-8")
    return hashlib.sha1(b"blob %d\0" % len(raw) + raw, usedforsecurity=False).hexdigest()


def _sha(*parts: str) -> str:
    return hashlib.sha1("\0".join(parts).encode(), usedforsecurity=False).hexdigest()


class FakeGitHub:
    """One repository whose refs move when the test pushes."""

    def __init__(self, router: respx.MockRouter, repository: str = REPOSITORY) -> None:
        self.repository = repository
        self.commits: dict[str, dict[str, str]] = {}
        self.refs: dict[str, str] = {}
        self.failing_blobs: set[str] = set()
        self.on_tree: Callable[[str], None] | None = None  # runs while a tree is being read
        base = f"{GITHUB}/repos/{repository}"
        self.commit_route = router.get(url__regex=rf"^{base}/commits/(?P<ref>.+)$").mock(
            side_effect=self._commit
        )
        self.tree_route = router.get(url__regex=rf"^{base}/git/trees/(?P<sha>[0-9a-f]+)").mock(
            side_effect=self._tree
        )
        self.blob_route = router.get(url__regex=rf"^{base}/git/blobs/(?P<sha>[0-9a-f]+)$").mock(
            side_effect=self._blob
        )

    def push(self, files: dict[str, str], ref: str = "main") -> str:
        parent = self.refs.get(ref, "")
        sha = _sha(parent, json.dumps(files, sort_keys=True))
        self.commits[sha] = dict(files)
        self.refs[ref] = sha
        return sha

    def etag(self, sha: str) -> str:
        return f'W/"{hashlib.sha256(sha.encode()).hexdigest()}"'

    @property
    def blob_calls(self) -> list[str]:
        return [str(call.request.url).rsplit("/", 1)[1] for call in self.blob_route.calls]

    def _commit(self, request: httpx.Request, ref: str) -> httpx.Response:
        sha = self.refs.get(ref)
        if sha is None:
            return httpx.Response(
                404,
                json={
                    "message": f"No commit found for SHA: {ref}",
                    "documentation_url": "https://docs.github.com/rest/commits/commits#get-a-commit",
                    "status": "404",
                },
            )
        etag = self.etag(sha)
        if request.headers.get("If-None-Match") == etag:
            return httpx.Response(304, headers={"ETag": etag})
        url = f"{GITHUB}/repos/{self.repository}/commits/{sha}"
        return httpx.Response(
            200,
            headers={"ETag": etag, "Content-Type": "application/json; charset=utf-8"},
            json={
                "sha": sha,
                "node_id": f"C_{sha[:20]}",
                "commit": {
                    "author": {
                        "name": "lead",
                        "email": "lead@example.com",
                        "date": "2026-05-01T10:00:00Z",
                    },
                    "committer": {
                        "name": "lead",
                        "email": "lead@example.com",
                        "date": "2026-05-01T10:00:00Z",
                    },
                    "message": "Update notes",
                    "tree": {"sha": _sha("tree", sha), "url": f"{url}/tree"},
                    "url": url,
                    "comment_count": 0,
                    "verification": {
                        "verified": False,
                        "reason": "unsigned",
                        "signature": None,
                        "payload": None,
                    },
                },
                "url": url,
                "html_url": f"https://github.com/{self.repository}/commit/{sha}",
                "comments_url": f"{url}/comments",
                "author": None,
                "committer": None,
                "parents": [],
                "stats": {"total": 1, "additions": 1, "deletions": 0},
                "files": [],
            },
        )

    def _tree(self, request: httpx.Request, sha: str) -> httpx.Response:
        if self.on_tree is not None:
            self.on_tree(sha)
        files = self.commits.get(sha)
        if files is None:
            return httpx.Response(404, json={"message": "Not Found", "status": "404"})
        assert request.url.params.get("recursive") == "1"
        entries: list[dict[str, Any]] = []
        directories = sorted(
            {"/".join(path.split("/")[: i + 1]) for path in files for i in range(path.count("/"))}
        )
        for directory in directories:
            entries.append(
                {
                    "path": directory,
                    "mode": "040000",
                    "type": "tree",
                    "sha": _sha("dir", directory),
                    "url": f"{GITHUB}/repos/{self.repository}/git/trees/{_sha('dir', directory)}",
                }
            )
        for path, content in sorted(files.items()):
            blob = git_blob_sha(content)
            entries.append(
                {
                    "path": path,
                    "mode": "100644",
                    "type": "blob",
                    "sha": blob,
                    "size": len(content.encode()),
                    "url": f"{GITHUB}/repos/{self.repository}/git/blobs/{blob}",
                }
            )
        entries.sort(key=lambda e: e["path"])
        return httpx.Response(
            200,
            json={
                "sha": _sha("tree", sha),
                "url": str(request.url),
                "tree": entries,
                "truncated": False,
            },
        )

    def _blob(self, request: httpx.Request, sha: str) -> httpx.Response:
        if sha in self.failing_blobs:
            return httpx.Response(502, json={"message": "Server Error"})
        for files in self.commits.values():
            for content in files.values():
                if git_blob_sha(content) == sha:
                    raw = content.encode("utf-8")
                    encoded = base64.encodebytes(raw).decode()  # in lines, as GitHub sends it
                    return httpx.Response(
                        200,
                        json={
                            "sha": sha,
                            "node_id": f"B_{sha[:20]}",
                            "size": len(raw),
                            "url": str(request.url),
                            "content": encoded,
                            "encoding": "base64",
                        },
                    )
        return httpx.Response(404, json={"message": "Not Found", "status": "404"})


Answer = dict[str, Any] | Callable[[dict[str, Any]], httpx.Response] | Exception


class FakeClaude:
    """The Messages API: answers in order from `answers`, else a summary of every agent."""

    def __init__(self, router: respx.MockRouter) -> None:
        self.answers: list[Answer] = []
        self.route = router.post(f"{ANTHROPIC}/v1/messages").mock(side_effect=self._answer)

    @property
    def bodies(self) -> list[dict[str, Any]]:
        return [json.loads(call.request.content) for call in self.route.calls]

    @staticmethod
    def document(body: dict[str, Any]) -> dict[str, Any]:
        """The JSON document the user message carries."""
        return json.loads(body["messages"][0]["content"])

    def _answer(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        if self.answers:
            answer = self.answers.pop(0)
            if isinstance(answer, Exception):
                raise answer
            if callable(answer):
                return answer(body)
            return message(body, json.dumps(answer))
        return message(body, every_agent_works(body))


def every_agent_works(body: dict[str, Any]) -> str:
    """The summary's JSON for a request: every agent it names works, next unknown."""
    agents = FakeClaude.document(body)["agents"]
    return json.dumps(
        {
            "agents": [
                {"agent_id": a["agent_id"], "now": f"{a['name']} works", "next": None}
                for a in agents
            ]
        }
    )


def message(
    body: dict[str, Any],
    text: str,
    *,
    input_tokens: int = 1_000,
    output_tokens: int = 200,
    stop_reason: str = "end_turn",
) -> httpx.Response:
    """A Messages API answer as Anthropic sends it."""
    return httpx.Response(
        200,
        headers={"request-id": "req_011CTest", "content-type": "application/json"},
        json=message_body(
            body,
            text,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            stop_reason=stop_reason,
        ),
    )


def message_body(
    body: dict[str, Any], text: str, *, input_tokens: int, output_tokens: int, stop_reason: str
) -> dict[str, Any]:
    """The JSON of a Messages API answer."""
    return {
        "id": "msg_01TestSummary",
        "type": "message",
        "role": "assistant",
        "model": body["model"],
        "content": [{"type": "text", "text": text}],
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
            "service_tier": "standard",
        },
    }


def api_error(status: int, kind: str, text: str) -> Callable[[dict[str, Any]], httpx.Response]:
    return lambda body: httpx.Response(
        status,
        headers={"request-id": "req_011CTestError", "content-type": "application/json"},
        json={
            "type": "error",
            "error": {"type": kind, "message": text},
            "request_id": "req_011CTestError",
        },
    )


@dataclass(frozen=True)
class Arrival:
    """One request the stand-in received: whose (the first path segment), when (epoch
    seconds, comparable with the store's timestamps on this machine), what."""

    caller: str
    at: float
    body: dict[str, Any]


class MessagesStandIn:
    """The Messages API on a loopback port: give each broker `url_for(name)` as its
    POCOLOBBY_ANTHROPIC_BASE_URL, and every request is counted under that name.

    Each answer is a summary of every agent the request names, billed as Anthropic would:
    input tokens by the request's size, output tokens at the request's max_tokens (so what
    an attempt costs is close to the broker's estimate). `hold_next()` keeps the next
    request open until `release()`, for a broker to be killed mid-call.
    """

    def __init__(self) -> None:
        self.arrivals: list[Arrival] = []
        self.held = threading.Event()  # a request is being held
        self._hold = False
        self._release = threading.Event()
        self._lock = threading.Lock()
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                stand_in._serve(self)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def start(self) -> MessagesStandIn:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._release.set()
        self.server.shutdown()
        self.server.server_close()

    def url_for(self, caller: str) -> str:
        return f"{self.url}/{caller}"

    def hold_next(self) -> None:
        with self._lock:
            self._hold, self._release = True, threading.Event()
            self.held.clear()

    def release(self) -> None:
        self._release.set()

    def count(self) -> int:
        with self._lock:
            return len(self.arrivals)

    def _serve(self, request: BaseHTTPRequestHandler) -> None:
        caller, _, rest = request.path.lstrip("/").partition("/")
        raw = request.rfile.read(int(request.headers.get("Content-Length", "0")))
        if rest != "v1/messages":
            request.send_error(404)
            return
        body = json.loads(raw)
        with self._lock:
            self.arrivals.append(Arrival(caller, time.time(), body))
            hold, self._hold = self._hold, False
            release = self._release
        if hold:
            self.held.set()
            release.wait(timeout=300)
        answer = message_body(
            body,
            every_agent_works(body),
            input_tokens=math.ceil(len(raw) / 4),
            output_tokens=int(body["max_tokens"]),
            stop_reason="end_turn",
        )
        encoded = json.dumps(answer).encode()
        try:
            request.send_response(200)
            request.send_header("content-type", "application/json")
            request.send_header("request-id", "req_011CStandIn")
            request.send_header("content-length", str(len(encoded)))
            request.end_headers()
            request.wfile.write(encoded)
        except OSError:  # the caller was killed while it waited
            pass
