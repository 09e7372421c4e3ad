"""Run the real broker (`python -m pocolobby serve`) as a subprocess, and the real CLI against it.

Not a test module: tests use it through the fixtures in `tests/server_fixtures.py`, and the
benchmarks import it directly. It does not import pytest or Django.

Every subprocess gets an explicit environment: the caller's, minus anything that would steer
the broker or the CLI somewhere else (DJANGO_SETTINGS_MODULE=tests.settings, POCOLOBBY_*,
DATABASE_URL, REDIS_URL), plus what this helper sets. So the server runs pocolobby.settings
with the embedded SQLite store in its own data directory, and the CLI reads that directory's
admin-token file.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import httpx

REPO_ROOT = Path(__file__).resolve().parent.parent
READY_TIMEOUT = 30.0
PORT_ATTEMPTS = 3
CLI_TIMEOUT = 60.0

# Variables of the calling process that must not leak into a broker or CLI subprocess.
_STEERING_PREFIXES = ("POCOLOBBY_",)
_STEERING_NAMES = frozenset({"DJANGO_SETTINGS_MODULE", "DATABASE_URL", "REDIS_URL"})


def clean_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The caller's environment without broker-steering variables, plus `extra`."""
    env = {
        name: value
        for name, value in os.environ.items()
        if name not in _STEERING_NAMES and not name.startswith(_STEERING_PREFIXES)
    }
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


STORE_FILE = "pocolobby.sqlite3"
_TEMPLATE: list[Path] = []


def _template_store() -> Path:
    """An empty store made once per test process by the real `pocolobby init`, without its
    broker-state row (each copy makes its own incarnation on first use, as a new store does).
    Applying the schema steps is most of a new broker's start (docs/PERFORMANCE.md, "The
    suite's time"), and every fixture broker would repeat it."""
    if _TEMPLATE:
        return _TEMPLATE[0]
    folder = Path(tempfile.mkdtemp(prefix="pocolobby-template-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    made = folder / "init"
    subprocess.run(
        [sys.executable, "-m", "pocolobby", "init", "--data-dir", str(made)],
        cwd=REPO_ROOT, env=clean_env(), stdin=subprocess.DEVNULL, capture_output=True,
        timeout=120, check=True,
    )  # fmt: skip
    template = folder / STORE_FILE
    with (
        sqlite3.connect(made / STORE_FILE) as source,
        sqlite3.connect(template) as copy,
    ):
        source.backup(copy)
        copy.execute("DELETE FROM lobbies_brokerstate")
    source.close()
    copy.close()
    _TEMPLATE.append(template)
    return template


def with_empty_store(data_dir: Path) -> Path:
    """`data_dir` holding an empty store of this release, as `init` leaves it (private folder
    and file), so that the broker started on it applies no schema step."""
    data_dir.mkdir(parents=True, exist_ok=True)
    data_dir.chmod(0o700)
    store = data_dir / STORE_FILE
    if not store.exists():
        shutil.copyfile(_template_store(), store)
        store.chmod(0o600)
    return data_dir


def admin(url: str, token: str, method: str, path: str, body: Any = None) -> Any:
    """A call to a running broker's admin API at `url` (the operator's side, on loopback): its
    JSON answer; fails the test on an error status, with the broker's answer."""
    response = httpx.request(
        method,
        f"{url}/v1/admin{path}",
        json=body,
        headers={"Authorization": f"Bearer {token}"},
        timeout=10,
    )
    assert response.status_code < 300, response.text
    return response.json()


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True)
class AgentConfig:
    """What `pocolobby agent add --config` wrote, and where."""

    path: Path
    url: str
    token: str
    lobby: str
    agent: str

    @classmethod
    def read(cls, path: Path) -> AgentConfig:
        data = json.loads(path.read_text())
        return cls(path, data["url"], data["token"], data["lobby"], data["agent"])

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}


class BrokerError(RuntimeError):
    """The broker did not start, or a CLI provisioning step failed."""


class Broker:
    """One broker process on a fixed port and data directory; restartable on both."""

    def __init__(
        self,
        data_dir: Path,
        *,
        port: int | None = None,
        env: Mapping[str, str] | None = None,
        log_path: Path | None = None,
    ) -> None:
        self.data_dir = Path(data_dir).resolve()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        # A port we picked may be taken by another process before the broker binds it; then
        # the first start moves to another one (a restart keeps its port: clients know it).
        self._may_move = port is None
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.extra_env = dict(env or {})
        self.log_path = log_path or self.data_dir.parent / f"{self.data_dir.name}-broker.log"
        self.process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    # ------------------------------------------------------------ lifecycle

    def start(self, timeout: float = READY_TIMEOUT) -> Broker:
        if self.running:
            raise BrokerError(f"the broker on {self.url} is already running")
        for _ in range(PORT_ATTEMPTS):
            if self._spawn_and_wait(timeout):
                self._may_move = False
                return self
            self.port = free_port()
            self.url = f"http://127.0.0.1:{self.port}"
        raise BrokerError(f"no free port after {PORT_ATTEMPTS} attempts; see {self.log_path}")

    def _spawn_and_wait(self, timeout: float) -> bool:
        """Start `serve`; True once it listens. False if it could not bind a port we may
        move; BrokerError for anything else."""
        self._log = self.log_path.open("ab")
        self._log.write(f"--- starting broker on {self.url}\n".encode())
        self._log.flush()
        began_at = self._log.tell()
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "pocolobby",
                "serve",
                "--port",
                str(self.port),
                "--data-dir",
                str(self.data_dir),
            ],
            cwd=REPO_ROOT,
            env=clean_env(self.extra_env),
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        return self._wait_ready(timeout, began_at)

    def _output_since(self, offset: int) -> str:
        with self.log_path.open("rb") as log:
            log.seek(offset)
            return log.read().decode(errors="replace")

    def _wait_ready(self, timeout: float, began_at: int) -> bool:
        """Ready = this process said it listens on our URL, and /v1/health answers there.

        The line comes first: whatever else answers on a port it failed to bind is not it.
        """
        deadline = time.monotonic() + timeout
        last_error = "no answer yet"
        listening = f"listening on {self.url}"
        with httpx.Client(timeout=2) as client:
            while time.monotonic() < deadline:
                assert self.process is not None
                if self.process.poll() is not None:
                    self._close_log()
                    output = self._output_since(began_at)
                    if self._may_move and "address already in use" in output:
                        return False
                    raise BrokerError(
                        f"the broker exited with {self.process.returncode} before it was ready; "
                        f"its output:\n{self.log_text()}"
                    )
                if listening not in self._output_since(began_at):
                    last_error = "it has not said it listens yet"
                    time.sleep(0.05)
                    continue
                try:
                    response = client.get(f"{self.url}/v1/health")
                    if response.status_code == 200:
                        return True
                    last_error = f"HTTP {response.status_code}"
                except httpx.TransportError as exc:
                    last_error = repr(exc)
                time.sleep(0.05)
        self.kill9()
        raise BrokerError(
            f"the broker on {self.url} was not ready within {timeout}s ({last_error}); "
            f"its output:\n{self.log_text()}"
        )

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    @property
    def pid(self) -> int:
        if self.process is None:
            raise BrokerError("the broker was never started")
        return self.process.pid

    def kill9(self) -> None:
        """SIGKILL: no shutdown code runs, exactly like a crash or a power cut of the process."""
        if self.running:
            assert self.process is not None
            os.kill(self.process.pid, signal.SIGKILL)
        self._reap(timeout=10)

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM and wait; SIGKILL if it does not exit in time."""
        if self.running:
            assert self.process is not None
            self.process.terminate()
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
        self._reap(timeout=10)

    def restart(self, timeout: float = READY_TIMEOUT) -> Broker:
        """Stop (if running) and start again on the same port and data directory."""
        self.stop()
        return self.start(timeout)

    def _reap(self, timeout: float) -> None:
        if self.process is not None:
            self.process.wait(timeout)
        self._close_log()

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    # ------------------------------------------------------------ operator side

    @property
    def admin_token(self) -> str:
        return (self.data_dir / "admin-token").read_text().strip()

    def cli_env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        return clean_env(
            {"POCOLOBBY_URL": self.url, "POCOLOBBY_DATA_DIR": str(self.data_dir), **(extra or {})}
        )

    def cli(
        self, *args: str, env: Mapping[str, str] | None = None, cwd: Path | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run `python -m pocolobby ARGS` against this broker; never raises on a failure exit."""
        return subprocess.run(
            [sys.executable, "-m", "pocolobby", *args],
            cwd=cwd or REPO_ROOT,
            env=self.cli_env(env),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=CLI_TIMEOUT,
            check=False,
        )

    def send_screenshot(self, sender: AgentConfig, to: str, folder: Path) -> tuple[int, bytes]:
        """`pocolobby msg send --attach` a small PNG from `sender` to `to`: its attachment id
        and bytes, for tests of where attachment files go."""
        from PIL import Image  # local: only the attachment tests draw an image

        shot = folder / f"shot-{sender.agent}-{to}.png"
        Image.new("RGB", (24, 16), (30, 120, 200)).save(shot, format="PNG")
        sent = self.cli(
            "msg", "send", "--config", str(sender.path), to, "see the shot",
            "--attach", str(shot), "--json",
        )  # fmt: skip
        if sent.returncode != 0:
            raise BrokerError(f"msg send --attach failed: {sent.stderr}")
        (attachment,) = json.loads(sent.stdout)["attachments"]
        return int(attachment["id"]), shot.read_bytes()

    def cli_ok(self, *args: str) -> subprocess.CompletedProcess[str]:
        result = self.cli(*args)
        if result.returncode != 0:
            raise BrokerError(
                f"pocolobby {' '.join(args)} exited {result.returncode}: "
                f"{result.stderr.strip() or result.stdout.strip()}"
            )
        return result

    def provision(
        self, lobby: str, agents: list[str] | tuple[str, ...], config_dir: Path
    ) -> dict[str, AgentConfig]:
        """Create `lobby` and add each agent with the real CLI; return the configs it wrote."""
        config_dir.mkdir(parents=True, exist_ok=True)
        self.cli_ok("lobby", "create", lobby)
        configs = {}
        for name in agents:
            path = config_dir / f"{lobby}-{name}.json"
            self.cli_ok("agent", "add", lobby, name, "--config", str(path))
            configs[name] = AgentConfig.read(path)
        return configs


# What the `broker_factory` fixture yields: start(env=None, name="broker") -> a running Broker.
BrokerFactory = Callable[..., Broker]
