"""Real deployment parts for tests/deploy: Debian's Caddy run from the Caddyfile that
docs/OPERATIONS.md prints, and a loopback stand-in for Postmark's HTTP API.

Not a test module; it does not import pytest or Django.
"""

from __future__ import annotations

import json
import re
import shutil
import socket
import ssl
import subprocess
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import IO, Any

from tests.server import REPO_ROOT, clean_env

OPERATIONS = REPO_ROOT / "docs" / "OPERATIONS.md"
CADDY = "/usr/bin/caddy"
CADDYFILE_HEADING = "# /etc/caddy/Caddyfile"
# The placeholders docs/OPERATIONS.md tells the reader to replace, and nothing else.
DOC_DOMAIN = "pocolobby.example.com"
DOC_TLS = "tls /etc/caddy/pocolobby/fullchain.pem /etc/caddy/pocolobby/privkey.pem"
DOC_UPSTREAMS = ("127.0.0.1:8787",)
DOC_SCALE_OUT_UPSTREAMS = ("10.0.0.11:8787", "10.0.0.12:8787")
READY_TIMEOUT = 30.0
# Where Caddy's internal CA keeps its root, under its data directory.
ROOT_CERT = Path("caddy/pki/authorities/local/root.crt")
LOOPBACK_NAMES = Path(__file__).resolve().parent / "loopback_names"


def caddy_path() -> str | None:
    return CADDY if Path(CADDY).exists() else shutil.which("caddy")


def doc_caddyfiles() -> list[str]:
    """Every fenced block of docs/OPERATIONS.md that starts with the Caddyfile heading."""
    blocks = re.findall(r"^```[^\n]*\n(.*?)^```", OPERATIONS.read_text(), re.S | re.M)
    return [block for block in blocks if block.startswith(CADDYFILE_HEADING)]


def doc_caddyfile(index: int, domain: str, upstreams: Mapping[str, str]) -> str:
    """The doc's `index`th Caddyfile with only the documented placeholders replaced: the
    domain, the `tls` line (Caddy's internal CA here) and the brokers' addresses."""
    text = doc_caddyfiles()[index]
    replacements = {DOC_TLS: "tls internal", DOC_DOMAIN: domain, **upstreams}
    for placeholder, value in replacements.items():
        if placeholder not in text:
            raise AssertionError(f"docs/OPERATIONS.md's Caddyfile no longer has {placeholder!r}")
        text = text.replace(placeholder, value)
    return text


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


@dataclass
class Caddy:
    """One `caddy run` on high ports, its data (and internal CA) under `home`."""

    caddyfile: str
    home: Path
    server_name: str
    https_port: int = 0
    http_port: int = 0
    process: subprocess.Popen[bytes] | None = None
    _log: IO[bytes] | None = None

    @property
    def root_cert(self) -> Path:
        return self.home / "data" / ROOT_CERT

    @property
    def log_path(self) -> Path:
        return self.home / "caddy.log"

    def config_text(self) -> str:
        """Global options for an unprivileged run (ports, no admin endpoint, no system trust
        store), then the doc's Caddyfile untouched."""
        return (
            "{\n"
            "    admin off\n"
            f"    http_port {self.http_port}\n"
            f"    https_port {self.https_port}\n"
            "    skip_install_trust\n"
            "    auto_https disable_redirects\n"
            "}\n\n" + self.caddyfile
        )

    def start(self) -> Caddy:
        binary = caddy_path()
        assert binary, "caddy is not installed"
        if not self.https_port:
            self.https_port, self.http_port = free_ports(2)
        self.home.mkdir(parents=True, exist_ok=True)
        config = self.home / "Caddyfile"
        config.write_text(self.config_text())
        env = clean_env(
            {
                "HOME": str(self.home),
                "XDG_DATA_HOME": str(self.home / "data"),
                "XDG_CONFIG_HOME": str(self.home / "config"),
            }
        )
        self._log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            [binary, "run", "--config", str(config), "--adapter", "caddyfile"],
            cwd=self.home,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self._wait_ready()
        return self

    def _wait_ready(self) -> None:
        """Ready = the internal CA exists and a TLS handshake for our name verifies with it."""
        deadline = time.monotonic() + READY_TIMEOUT
        problem = "no root certificate yet"
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise AssertionError(f"caddy exited {self.process.returncode}: {self.log_text()}")
            if self.root_cert.exists():
                try:
                    context = ssl.create_default_context(cafile=str(self.root_cert))
                    with (
                        socket.create_connection(("127.0.0.1", self.https_port), timeout=2) as raw,
                        context.wrap_socket(raw, server_hostname=self.server_name),
                    ):
                        return
                except (OSError, ssl.SSLError) as error:
                    problem = repr(error)
            time.sleep(0.1)
        self.stop()
        raise AssertionError(f"caddy was not ready ({problem}): {self.log_text()}")

    def ssl_context(self) -> ssl.SSLContext:
        """Trusts Caddy's root and nothing else."""
        return ssl.create_default_context(cafile=str(self.root_cert))

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        if self._log is not None:
            self._log.close()
            self._log = None

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-4000:]
        except FileNotFoundError:
            return ""


def trust_store(home: Path, root_cert: Path) -> None:
    """An NSS database under `home` (where Chromium on Linux looks) trusting Caddy's root."""
    nssdb = home / ".pki" / "nssdb"
    nssdb.mkdir(parents=True)
    for command in (
        ["certutil", "-d", f"sql:{nssdb}", "-N", "--empty-password"],
        ["certutil", "-d", f"sql:{nssdb}", "-A", "-t", "C,,", "-n", "caddy", "-i", str(root_cert)],
    ):
        subprocess.run(command, check=True, capture_output=True, timeout=30)


@dataclass
class MailedMessage:
    to: str
    sender: str
    subject: str
    body: str
    at: float


@dataclass
class PostmarkStandIn:
    """Postmark's `/email` and `/email/batch` on a loopback port, answering as Postmark does,
    refusing any other server token; keeps what it was asked to send."""

    token: str
    messages: list[MailedMessage] = field(default_factory=list)
    _server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}/"

    def start(self) -> PostmarkStandIn:
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"null")
                if self.headers.get("X-Postmark-Server-Token") != stand_in.token:
                    self._answer(401, {"ErrorCode": 10, "Message": "Bad or missing API token"})
                    return
                if self.path == "/email/batch" and isinstance(body, list):
                    self._answer(200, [stand_in.accept(item) for item in body])
                elif self.path == "/email" and isinstance(body, dict):
                    self._answer(200, stand_in.accept(body))
                else:
                    self._answer(422, {"ErrorCode": 402, "Message": "Invalid JSON"})

            def _answer(self, status: int, data: Any) -> None:
                raw = json.dumps(data).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # quiet: the test reads `messages`

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def accept(self, item: dict[str, Any]) -> dict[str, Any]:
        self.messages.append(
            MailedMessage(
                to=str(item.get("To", "")),
                sender=str(item.get("From", "")),
                subject=str(item.get("Subject", "")),
                body=str(item.get("TextBody", "")),
                at=time.monotonic(),
            )
        )
        return {
            "ErrorCode": 0,
            "Message": "OK",
            "MessageID": str(uuid.uuid4()),
            "SubmittedAt": "2026-12-03T10:00:00.0000000Z",
            "To": item.get("To", ""),
        }

    def sent_to(self, address: str) -> list[MailedMessage]:
        return [m for m in self.messages if address in m.to]

    def latest_code(self, address: str, timeout: float = 10.0) -> str:
        """The newest six-digit code mailed to `address`."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for message in reversed(self.sent_to(address)):
                match = re.search(r"\b(\d{6})\b", message.body)
                if match:
                    return match.group(1)
            time.sleep(0.05)
        raise AssertionError(f"no code was mailed to {address}")

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
