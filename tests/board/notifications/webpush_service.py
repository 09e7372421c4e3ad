"""A push service stand-in on loopback: https with a certificate made for 127.0.0.1, which
keeps every push it is sent and answers what the test tells it to.

Modes, for all endpoints (`mode`) or one endpoint's name (`modes[name]`), as the probe's
push services behaved: "answer" (at once), "slow" (after `slow_seconds`), "hang" (takes
the request, never answers) and "trickle" (a status line, then one header line every
`trickle_seconds`, never ending). Hanging and trickling stop when the broker lets go or
the stand-in closes.

`Device` is the browser's side of a subscription: its P-256 key pair and auth secret, so a
test decrypts each push (aes128gcm, RFC 8291) exactly as the browser would, and checks the
VAPID JWT (RFC 8292) against the broker's public key.
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import ipaddress
import json
import os
import ssl
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Literal

import http_ece
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature
from cryptography.x509.oid import NameOID


def b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def unb64url(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@dataclass
class Device:
    """One browser's subscription keys."""

    key: ec.EllipticCurvePrivateKey = field(
        default_factory=lambda: ec.generate_private_key(ec.SECP256R1())
    )
    auth: bytes = field(default_factory=lambda: os.urandom(16))

    @property
    def p256dh(self) -> str:
        return b64url(
            self.key.public_key().public_bytes(
                serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
            )
        )

    def subscription(self, endpoint: str) -> dict[str, Any]:
        """What `PushSubscription.toJSON()` gives the page."""
        return {
            "endpoint": endpoint,
            "expirationTime": None,
            "keys": {"p256dh": self.p256dh, "auth": b64url(self.auth)},
        }

    def decrypt(self, body: bytes) -> dict[str, Any]:
        plain = http_ece.decrypt(
            body, private_key=self.key, auth_secret=self.auth, version="aes128gcm"
        )
        payload: dict[str, Any] = json.loads(plain)
        return payload


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes


def verify_vapid(authorization: str, public_key: str, audience: str) -> dict[str, Any]:
    """The JWT's claims, after checking its ES256 signature with the broker's public key."""
    scheme, _, rest = authorization.partition(" ")
    assert scheme == "vapid", authorization
    parts = dict(item.strip().split("=", 1) for item in rest.split(","))
    assert parts["k"] == public_key
    header_b64, claims_b64, signature_b64 = parts["t"].split(".")
    assert json.loads(unb64url(header_b64)) == {"typ": "JWT", "alg": "ES256"}
    raw = unb64url(signature_b64)
    signature = encode_dss_signature(
        int.from_bytes(raw[:32], "big"), int.from_bytes(raw[32:], "big")
    )
    key = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), unb64url(public_key))
    key.verify(signature, f"{header_b64}.{claims_b64}".encode(), ec.ECDSA(hashes.SHA256()))
    claims: dict[str, Any] = json.loads(unb64url(claims_b64))
    assert claims["aud"] == audience
    assert claims["exp"] > datetime.datetime.now(datetime.UTC).timestamp()
    assert claims["sub"].startswith(("mailto:", "https://"))
    return claims


# The browser's subscribe, answered as a push service would: the endpoint and keys a real
# subscription carries, the same object on the next getSubscription, gone on unsubscribe.
FAKE_PUSH_SERVICE = """
(() => {
  let current = null;
  const keys = %s;
  PushManager.prototype.subscribe = async function (options) {
    if (!options || !options.applicationServerKey) throw new Error("no applicationServerKey");
    window.__applicationServerKey = Array.from(new Uint8Array(options.applicationServerKey));
    current = {
      endpoint: "%s" + Date.now(),
      toJSON() { return { endpoint: this.endpoint, expirationTime: null, keys }; },
      async unsubscribe() { current = null; return true; },
    };
    return current;
  };
  PushManager.prototype.getSubscription = async function () { return current; };
})();
"""


# The name the certificate is also made for: a test resolves it to 127.0.0.1.
NAME = "push.stand-in.test"


def _certificate(directory: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "push stand-in")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName(NAME)]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "push.pem", directory / "push.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


Mode = Literal["answer", "slow", "hang", "trickle"]


class PushService:
    """Start with `with PushService() as service:`; `service.ca` is the file to trust."""

    def __init__(self) -> None:
        self.received: list[Received] = []
        self.held: list[Received] = []  # taken by "hang" or "trickle", never answered
        self.let_go: list[str] = []  # paths whose held request the broker abandoned
        self.status = 201
        self.mode: Mode = "answer"
        self.modes: dict[str, Mode] = {}
        self.slow_seconds = 2.0
        self.trickle_seconds = 1.0
        self.closing = threading.Event()
        self.changed = threading.Condition()
        self._dir = tempfile.TemporaryDirectory(prefix="push-stand-in-")
        self.ca, key = _certificate(Path(self._dir.name))
        service = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(length)
                headers = {k.lower(): v for k, v in self.headers.items()}
                push = Received(self.path, headers, body)
                mode = service.modes.get(self.path.rsplit("/", 1)[-1], service.mode)
                if mode in ("hang", "trickle"):
                    service._note(service.held, push)
                    self._hold(mode)
                    service._note(service.let_go, push.path)
                    return
                if mode == "slow":
                    service.closing.wait(service.slow_seconds)
                service._note(service.received, push)
                self.send_response(service.status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def _hold(self, mode: Mode) -> None:
                """Until the broker lets go (its socket closes) or the stand-in closes."""
                self.connection.settimeout(0.2)
                try:
                    if mode == "trickle":
                        self.wfile.write(b"HTTP/1.1 201 Created\r\n")
                    line = 0
                    while not service.closing.is_set():
                        if mode == "trickle":
                            line += 1
                            self.wfile.write(f"X-Trickle-{line}: 1\r\n".encode())
                            self.wfile.flush()
                        ends = time.monotonic() + service.trickle_seconds
                        while time.monotonic() < ends and not service.closing.is_set():
                            if self._gone():
                                return
                except OSError:
                    return
                finally:
                    self.close_connection = True

            def _gone(self) -> bool:
                try:
                    return self.connection.recv(1) == b""
                except TimeoutError:
                    return False
                except (OSError, ValueError):
                    return True

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.ca, key)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        self.origin = f"https://127.0.0.1:{self.port}"
        self.host_port = f"127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def endpoint(self, name: str) -> str:
        return f"{self.origin}/push/{name}"

    def _note(self, into: list[Any], item: Any) -> None:
        with self.changed:
            into.append(item)
            self.changed.notify_all()

    def wait_for(self, fact: Callable[[], bool], seconds: float = 60.0) -> None:
        """Until `fact()` holds; fails the test if it does not within `seconds`."""
        with self.changed:
            assert self.changed.wait_for(fact, seconds), "the push stand-in never saw it"

    def __enter__(self) -> PushService:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.closing.set()
        self.server.shutdown()
        self.server.server_close()
        self._dir.cleanup()


@contextlib.contextmanager
def trusted_service(settings: Any, monkeypatch: Any, *names: str) -> Iterator[PushService]:
    """A running stand-in the broker may push to (its address, and each of `names` on its
    port) and whose certificate authority requests trust."""
    with PushService() as running:
        settings.POCOLOBBY_PUSH_ENDPOINT_ALLOW = frozenset(
            {running.host_port, *(f"{name}:{running.port}" for name in names)}
        )
        monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(running.ca))
        yield running
