"""The server `pocolobby serve` runs (lobbies/fastlane/server.py): where its database work runs."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import http.server
import socket
import subprocess
import sys
import threading
import time
import weakref

import httpx
import pytest
from asgiref.sync import sync_to_async
from django.db import connection

from lobbies.fastlane.server import (
    OneWritePerTurn,
    confine_sqlite_to_one_thread,
    freeze_startup_objects,
)
from tests.server import REPO_ROOT, Broker, clean_env, free_port

# The `broker_factory` fixture.
pytest_plugins = ("tests.server_fixtures",)


def _thread_after_a_while() -> int:
    time.sleep(0.02)  # long enough that a pool would hand the next call to another thread
    return threading.get_ident()


async def _threads_used(confine: bool) -> set[int]:
    if confine:
        confine_sqlite_to_one_thread()
    calls = [sync_to_async(_thread_after_a_while, thread_sensitive=False)() for _ in range(6)]
    return set(await asyncio.gather(*calls))


def test_on_sqlite_all_database_work_off_the_loop_shares_one_thread_and_connection():
    threads = asyncio.run(_threads_used(confine=True))
    if connection.vendor == "sqlite":
        assert len(threads) == 1
    else:
        assert len(threads) > 1  # PostgreSQL keeps the pool


def test_without_it_the_same_calls_spread_over_a_pool():
    assert len(asyncio.run(_threads_used(confine=False))) > 1


@pytest.mark.slow
def test_startup_objects_are_frozen_out_of_the_collector_and_startups_garbage_collected():
    class Cycle:
        pass

    garbage = Cycle()
    garbage.me = garbage  # type: ignore[attr-defined]  # unreachable once deleted: a cycle
    collected = weakref.ref(garbage)
    del garbage
    try:
        freeze_startup_objects()
        assert gc.get_freeze_count() > 1000
        assert collected() is None  # collected before the freeze, not frozen for good
    finally:
        gc.unfreeze()


def test_the_test_harness_never_mistakes_another_server_on_its_port_for_the_broker(tmp_path):
    """tests/server.py picks a free port, then the broker binds it: another process may take
    it in between. Whatever answers there is not the broker; its first start moves on."""

    class AnswersEverything(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    squatter = http.server.ThreadingHTTPServer(("127.0.0.1", 0), AnswersEverything)
    threading.Thread(target=squatter.serve_forever, daemon=True).start()
    taken = squatter.server_address[1]
    broker = Broker(tmp_path / "data")
    broker.port, broker.url = taken, f"http://127.0.0.1:{taken}"
    try:
        broker.start()
        assert broker.port != taken
        assert httpx.get(f"{broker.url}/v1/health").json()["service"] == "pocolobby"
        assert "address already in use" in broker.log_text()
    finally:
        broker.stop()
        squatter.shutdown()


@pytest.mark.slow
def test_a_second_serve_on_the_same_sqlite_store_is_refused_naming_the_first(broker_factory):
    """Two processes on one SQLite store would both run the timers; the second is refused."""
    first = broker_factory()  # the harness runs the embedded SQLite store
    second = subprocess.run(
        [
            sys.executable,
            "-m",
            "pocolobby",
            "serve",
            "--port",
            str(free_port()),
            "--data-dir",
            str(first.data_dir),
        ],
        cwd=REPO_ROOT,
        env=clean_env(first.extra_env),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert second.returncode == 1, second.stdout + second.stderr
    assert f"pid {first.pid}" in second.stderr and first.url in second.stderr
    assert "holds the store" in second.stderr
    assert "listening on" not in second.stdout
    assert httpx.get(f"{first.url}/v1/health").json()["service"] == "pocolobby"
    first.stop()
    first.start()  # the lock died with the process: a restart takes it at once


def _closed_within(sock: socket.socket, seconds: float) -> bool:
    """True if the server closes `sock` (EOF or reset) within `seconds`."""
    sock.settimeout(seconds)
    try:
        return sock.recv(1024) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


@pytest.mark.slow
def test_a_connection_sending_half_a_request_line_is_closed(tmp_path):
    """A client that never finishes its headers (slowloris) no longer holds a connection
    forever; one that sends nothing at all is closed the same way."""
    broker = Broker(tmp_path / "data", env={"POCOLOBBY_HEADER_SECONDS": "1"})
    broker.start()
    try:
        with socket.create_connection(("127.0.0.1", broker.port)) as half:
            half.sendall(b"GET /v1/hea")
            assert _closed_within(half, 10)
        with socket.create_connection(("127.0.0.1", broker.port)) as silent:
            assert _closed_within(silent, 10)
        with socket.create_connection(("127.0.0.1", broker.port)) as headers_only:
            headers_only.sendall(b"GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-A: b\r\n")
            assert _closed_within(headers_only, 10)
        # A whole request is answered, and the kept-alive connection is not cut at the bound.
        with socket.create_connection(("127.0.0.1", broker.port)) as honest:
            request = f"GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1:{broker.port}\r\n\r\n"
            honest.sendall(request.encode())
            assert honest.recv(4096).startswith(b"HTTP/1.1 200")
            assert not _closed_within(honest, 2)
            honest.sendall(request.encode())
            assert honest.recv(4096).startswith(b"HTTP/1.1 200")
            # Its next request stalling in its headers is closed like any other.
            honest.sendall(b"GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            assert _closed_within(honest, 10)
    finally:
        broker.stop()


class _Recorded(asyncio.Transport):
    """The socket's side of a transport: what was written, in which calls."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, bytes]] = []
        self.closing = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.calls.append(("write", bytes(data)))

    def close(self) -> None:
        self.calls.append(("close", b""))
        self.closing = True

    def abort(self) -> None:
        self.calls.append(("abort", b""))
        self.closing = True

    def is_closing(self) -> bool:
        return self.closing


def test_the_writes_of_one_loop_turn_leave_in_one_call_in_order():
    """uvicorn writes a response's head, then its body: they leave together. A close sends
    what is pending first; an abort drops it; a closed transport is not written."""

    async def scenario() -> list[list[tuple[str, bytes]]]:
        loop = asyncio.get_running_loop()
        seen = []
        for ending in ("turn", "close", "abort", "closed"):
            socket_side = _Recorded()
            transport = OneWritePerTurn(socket_side, loop)
            transport.write(b"HTTP/1.1 200 OK\r\n\r\n")
            transport.writelines([b"{", b"}"])
            assert socket_side.calls == []  # nothing left yet
            if ending == "close":
                transport.close()
            elif ending == "abort":
                transport.abort()
            elif ending == "closed":
                socket_side.closing = True
            await asyncio.sleep(0)
            await asyncio.sleep(0)
            seen.append(socket_side.calls)
        return seen

    turn, close, abort, closed = asyncio.run(scenario())
    assert turn == [("write", b"HTTP/1.1 200 OK\r\n\r\n{}")]
    assert close == [("write", b"HTTP/1.1 200 OK\r\n\r\n{}"), ("close", b"")]
    assert abort == [("abort", b"")]
    assert closed == []


def test_an_answer_carries_its_length_not_chunks(tmp_path):
    broker = Broker(tmp_path / "data")
    broker.start()
    try:
        with socket.create_connection(("127.0.0.1", broker.port)) as client:
            request = f"GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1:{broker.port}\r\n\r\n"
            client.sendall(request.encode())
            answer = b""
            while b"\r\n\r\n" not in answer:
                answer += client.recv(4096)
            head, _, body = answer.partition(b"\r\n\r\n")
            fields = dict(line.split(b": ", 1) for line in head.lower().split(b"\r\n")[1:])
            assert b"transfer-encoding" not in fields
            length = int(fields[b"content-length"])
            while len(body) < length:
                body += client.recv(4096)
            assert len(body) == length and body.startswith(b"{")
    finally:
        broker.stop()


def test_push_bytes_above_what_a_bridge_takes_is_refused_at_start(monkeypatch):
    from pocolobby.config import Bounds

    monkeypatch.setenv("POCOLOBBY_PUSH_BYTES", str(64 * 1024))
    assert Bounds.from_env().push_bytes == 64 * 1024
    monkeypatch.setenv("POCOLOBBY_PUSH_BYTES", str(64 * 1024 + 1))
    with pytest.raises(SystemExit, match="POCOLOBBY_PUSH_BYTES must be at most 65536"):
        Bounds.from_env()


def _serve(data_dir, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "pocolobby", "serve", "--data-dir", str(data_dir), *args],
        cwd=REPO_ROOT,
        env=clean_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.slow
@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.0.2.7", "broker.example"])  # noqa: S104
def test_serving_plain_http_beyond_this_machine_is_refused_unless_asked_for(tmp_path, host):
    """Issue 33: `serve --host 0.0.0.0` served plaintext to the network without a word."""
    refused = _serve(tmp_path / "data", "--host", host, "--port", str(free_port()))
    out, err = refused.communicate(timeout=60)
    assert refused.returncode == 1, out + err
    assert f"refusing to serve plain http on {host}" in err
    assert "put TLS in front of it" in err and "--insecure-http" in err
    assert "Traceback" not in err and not (tmp_path / "data").exists()  # nothing touched


@pytest.mark.slow
def test_insecure_http_serves_on_every_address_when_asked_for(tmp_path):
    port = free_port()
    every = "0.0.0.0"  # noqa: S104 (the point of the test)
    served = _serve(tmp_path / "data", "--host", every, "--port", str(port), "--insecure-http")
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                health = httpx.get(f"http://127.0.0.1:{port}/v1/health", timeout=2)
                break
            except httpx.TransportError:
                assert served.poll() is None, served.communicate()
                time.sleep(0.2)
        assert health.json()["service"] == "pocolobby"
    finally:
        served.terminate()
        served.communicate(timeout=30)


def _first_answer(sock: socket.socket, seconds: float) -> bytes:
    sock.settimeout(seconds)
    try:
        return sock.recv(65536)
    except (TimeoutError, ConnectionResetError):
        return b""


@pytest.mark.slow
def test_headers_over_their_bound_get_431_and_a_stalled_body_408(tmp_path):
    """Issue 28: 8 MiB of headers were accepted, and a body that stalled was never timed out."""
    broker = Broker(
        tmp_path / "data",
        env={"POCOLOBBY_BODY_STALL_SECONDS": "2", "POCOLOBBY_HEADER_BYTES": "16384"},
    )
    broker.start()
    host = f"Host: 127.0.0.1:{broker.port}\r\n"
    try:
        # 8 MiB of one header, sent as fast as the server takes it: refused long before.
        with socket.create_connection(("127.0.0.1", broker.port)) as huge:
            huge.sendall(f"GET /v1/health HTTP/1.1\r\n{host}X-Big: ".encode())
            sent = 0
            with contextlib.suppress(OSError):
                while sent < 8 * 1024 * 1024:
                    huge.sendall(b"a" * 65536)
                    sent += 65536
            answer = _first_answer(huge, 10)
        assert answer.startswith(b"HTTP/1.1 431 Request Header Fields Too Large"), answer[:200]
        assert b"headers_too_large" in answer and b"POCOLOBBY_HEADER_BYTES" in answer
        # Many headers in one write, each small, past the bound in all.
        many = "".join(f"X-H{n}: {'v' * 100}\r\n" for n in range(200))
        with socket.create_connection(("127.0.0.1", broker.port)) as wide:
            wide.sendall(f"GET /v1/health HTTP/1.1\r\n{host}{many}\r\n".encode())
            assert _first_answer(wide, 10).startswith(b"HTTP/1.1 431")
        # Headers within the bound are served.
        fine = "".join(f"X-H{n}: {'v' * 100}\r\n" for n in range(100))
        with socket.create_connection(("127.0.0.1", broker.port)) as honest:
            honest.sendall(f"GET /v1/health HTTP/1.1\r\n{host}{fine}\r\n".encode())
            assert _first_answer(honest, 10).startswith(b"HTTP/1.1 200")
        # A JSON body that stops after 2 bytes: 408 after the stall bound, then closed.
        post = f"POST /v1/tools/send_message HTTP/1.1\r\n{host}Content-Length: 100\r\n"
        with socket.create_connection(("127.0.0.1", broker.port)) as stalled:
            began = time.monotonic()
            stalled.sendall(f"{post}Content-Type: application/json\r\n\r\n{{}}".encode())
            answer = _first_answer(stalled, 15)
            waited = time.monotonic() - began
            assert answer.startswith(b"HTTP/1.1 408"), answer
            assert b"body_timeout" in answer and b"connection: close" in answer.lower()
            assert 1.5 <= waited < 10, waited
            assert _closed_within(stalled, 5)
        # A slow body that keeps arriving is not cut: 5 pieces a second apart.
        with socket.create_connection(("127.0.0.1", broker.port)) as slow:
            slow.sendall(f"{post}Content-Type: application/json\r\n\r\n".encode())
            for piece in [b"{" + b" " * 19] + [b" " * 20] * 3 + [b" " * 19 + b"}"]:
                time.sleep(1)
                slow.sendall(piece)
            answer = _first_answer(slow, 10)
            assert answer.startswith(b"HTTP/1.1 401"), answer  # read whole, then no token
    finally:
        broker.stop()
