"""The wire under pywebpush: one POST to the address the endpoint check approved, over TLS
verified for the endpoint's name, abandoned when the whole push outlasts its limit.

requests (pywebpush's default) resolves the name again to connect, and bounds each socket
read, not the request: a push service that trickles a header line every few seconds holds
it for as long as it likes. Here the check's addresses are the only ones connected to, and
a timer shuts the socket at the deadline, which ends whatever read is waiting on it.
No database here.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import socket
import ssl
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from requests import certs

from board.notifications.webpush_endpoints import Endpoint

# The most of a push service's answer that is read (it says why it refused, at most).
ANSWER_BYTES = 64 * 1024


class PushUnanswered(Exception):
    """The push service did not answer in time, or the connection failed; names which."""


@dataclass(frozen=True)
class PushAnswer:
    """What pywebpush reads of a response: status, reason, text, headers."""

    status_code: int
    reason: str
    text: str
    headers: dict[str, str] = field(default_factory=dict)


def trusted_context() -> ssl.SSLContext:
    """The certificates requests would trust: `REQUESTS_CA_BUNDLE` (or `CURL_CA_BUNDLE`)
    when set, else its own bundle."""
    bundle = os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE")
    return ssl.create_default_context(cafile=bundle or certs.where())


class _Deadline:
    """Shuts the push's socket when its time is up, from a timer thread: a blocked
    connect, handshake or read then returns at once."""

    def __init__(self, seconds: float) -> None:
        self.ends = time.monotonic() + seconds
        self.expired = False
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True
        self._timer.start()

    def left(self) -> float:
        return max(0.0, self.ends - time.monotonic())

    def watch(self, sock: socket.socket) -> None:
        """Watch the connection through a duplicate of its socket: the TLS layer takes the
        original over, and shutting the duplicate ends the connection under it."""
        with self._lock:
            self._sock = sock.dup()
            if self.expired:
                self._shut()

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            self._shut()

    def _shut(self) -> None:
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.shutdown(socket.SHUT_RDWR)

    def cancel(self) -> None:
        self._timer.cancel()
        with self._lock:
            if self._sock is not None:
                self._sock.close()
                self._sock = None


class _PinnedConnection(http.client.HTTPSConnection):
    """Connects to the approved addresses in turn, never to another; SNI, certificate and
    Host are the endpoint's name."""

    def __init__(self, endpoint: Endpoint, deadline: _Deadline, context: ssl.SSLContext) -> None:
        super().__init__(endpoint.host, endpoint.port, timeout=deadline.left(), context=context)
        self.endpoint = endpoint
        self.deadline = deadline
        self.tls = context

    def connect(self) -> None:
        failure: OSError | None = None
        for address in self.endpoint.addresses:
            try:
                raw = socket.create_connection((address, self.port), self.deadline.left())
            except OSError as error:
                failure = error
                continue
            self.deadline.watch(raw)
            self.sock = self.tls.wrap_socket(raw, server_hostname=self.endpoint.host)
            return
        raise failure or OSError("the push endpoint has no address to connect to")


class PinnedSession:
    """What pywebpush takes as its `requests_session`: it calls `post` once per push."""

    def __init__(self, endpoint: Endpoint, seconds: float) -> None:
        self.endpoint = endpoint
        self.seconds = seconds

    def post(
        self, url: str, *, data: bytes | None, headers: Mapping[str, str], timeout: float
    ) -> PushAnswer:
        if url != self.endpoint.url:
            raise PushUnanswered("the push went to an endpoint that was not checked")
        deadline = _Deadline(min(self.seconds, timeout))
        connection = _PinnedConnection(self.endpoint, deadline, trusted_context())
        parts = urlsplit(url)
        path = parts.path or "/"
        if parts.query:
            path += f"?{parts.query}"
        try:
            connection.request("POST", path, body=data or b"", headers=dict(headers))
            response = connection.getresponse()
            text = response.read(ANSWER_BYTES).decode("utf-8", "replace")
            if deadline.expired:  # cut short: what was read is no answer
                raise PushUnanswered(f"no answer within {self.seconds:g} s")
            return PushAnswer(response.status, response.reason, text, dict(response.getheaders()))
        except (OSError, http.client.HTTPException, ValueError) as error:
            if deadline.expired:
                raise PushUnanswered(f"no answer within {self.seconds:g} s") from None
            raise PushUnanswered(f"the connection failed ({type(error).__name__})") from None
        finally:
            deadline.cancel()
            connection.close()
