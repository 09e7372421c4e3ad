"""Every command that changes a SQLite store holds its lock first, and is refused, naming the
holder and changing no file, while another process (a serving broker) has it."""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.eventually import eventually
from tests.server import REPO_ROOT, Broker, clean_env, free_port

pytest_plugins = ("tests.server_fixtures",)
pytestmark = pytest.mark.slow


def cli(data_dir: Path, *args: str, env: dict[str, str] | None = None):
    """The CLI on a data directory, no broker URL unless given."""
    return subprocess.run(
        [sys.executable, "-m", "pocolobby", *args],
        cwd=REPO_ROOT,
        env=clean_env({"POCOLOBBY_DATA_DIR": str(data_dir), **(env or {})}),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def files(root: Path) -> dict[str, str]:
    """Every file under `root` (names and sha256 of contents), and every directory."""
    tree: dict[str, str] = {}
    for path in sorted(root.rglob("*")):
        name = str(path.relative_to(root))
        tree[name] = "dir" if path.is_dir() else hashlib.sha256(path.read_bytes()).hexdigest()
    return tree


@contextlib.contextmanager
def frozen(broker: Broker) -> Iterator[None]:
    """The broker stopped (SIGSTOP) but alive, its lock held: nothing it does changes a file
    while a refused command runs, so any change is the refused command's."""
    os.kill(broker.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(broker.pid, signal.SIGCONT)


def applied(store: Path) -> set[tuple[str, str]]:
    conn = sqlite3.connect(f"{store.as_uri()}?mode=ro", uri=True)
    try:
        return {tuple(row) for row in conn.execute("SELECT app, name FROM django_migrations")}
    finally:
        conn.close()


def test_restore_init_and_manage_are_refused_while_a_broker_serves_on_another_port(
    broker: Broker, tmp_path: Path
):
    backup = broker.cli("backup", "--to", str(tmp_path / "backups"))
    assert backup.returncode == 0, backup.stderr
    taken = re.search(r"^backup (\S+):", backup.stdout, re.M).group(1)
    # POCOLOBBY_URL names a port where nothing answers: only the store's lock can tell.
    elsewhere = {"POCOLOBBY_URL": f"http://127.0.0.1:{free_port()}"}
    holder = f"pocolobby serve (pid {broker.pid}, on {broker.url}, since "

    for command, refusal in [
        (("restore", taken), "restore refused, nothing changed: "),
        (("init",), "refusing to check, initialise or upgrade the store: "),
        (("manage", "migrate"), "refusing to run `manage migrate`: "),
        (("manage", "createsuperuser", "--noinput", "--username", "x", "--email", "x@x.io"), ""),
        (("manage", "shell", "-c", "print('ran')"), ""),
    ]:
        with frozen(broker):
            before = files(broker.data_dir)
            result = broker.cli(*command, env=elsewhere)
            after = files(broker.data_dir)
        assert result.returncode == 1, (command, result.stdout, result.stderr)
        assert refusal in result.stderr and holder in result.stderr, (command, result.stderr)
        assert f"holds the store {broker.data_dir / 'pocolobby.sqlite3'}" in result.stderr
        assert "Traceback" not in result.stderr and "ran" not in result.stdout
        assert after == before, command

    # Commands that only read run beside it; the broker served on throughout.
    shown = broker.cli("manage", "showmigrations", "lobbies")
    assert shown.returncode == 0 and "[X] 0001_initial" in shown.stdout, shown.stderr
    assert httpx.get(f"{broker.url}/v1/health").json()["service"] == "pocolobby"


def test_serve_applies_no_schema_step_while_another_process_holds_the_lock(tmp_path: Path):
    data = tmp_path / "data"
    assert cli(data, "init").returncode == 0
    store = data / "pocolobby.sqlite3"
    back = cli(data, "manage", "migrate", "board", "0003")  # an older release's store
    assert back.returncode == 0, back.stderr
    assert ("board", "0004_public_message_contents") not in applied(store)
    # A real holder: a `manage shell` holds the lock for as long as it runs.
    holder = subprocess.Popen(
        [sys.executable, "-m", "pocolobby", "manage", "shell", "-c", "import time; time.sleep(60)"],
        cwd=REPO_ROOT,
        env=clean_env({"POCOLOBBY_DATA_DIR": str(data)}),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        lock = data / "pocolobby.sqlite3.serve-lock"

        def held() -> bool:
            assert holder.poll() is None, holder.stderr
            return f"pid {holder.pid}," in (lock.read_text() if lock.exists() else "")

        eventually(held, timeout=60, every=0.05, what="the holder's serve lock")
        before = files(data)

        serve = cli(data, "serve", "--port", str(free_port()))
        init = cli(data, "init")

        assert files(data) == before
        assert ("board", "0004_public_message_contents") not in applied(store)
        for refused in (serve, init):
            assert refused.returncode == 1, refused.stdout + refused.stderr
            assert f"pocolobby manage shell (pid {holder.pid}, since " in refused.stderr
            assert "listening on" not in refused.stdout
    finally:
        holder.terminate()
        holder.wait(30)

    upgraded = cli(data, "init")  # the lock died with its holder
    assert upgraded.returncode == 0, upgraded.stderr
    assert "upgraded" in upgraded.stdout
    assert ("board", "0004_public_message_contents") in applied(store)


def test_manage_refuses_a_store_that_is_not_ours_or_not_initialised_leaving_it_unchanged(
    tmp_path: Path,
):
    data = tmp_path / "data"
    data.mkdir()
    (data / "pocolobby.sqlite3").write_text("my diary\n" * 100)
    before = files(data)
    foreign = cli(data, "manage", "migrate")
    assert foreign.returncode == 2, foreign.stdout + foreign.stderr
    assert "refusing to run `manage migrate`" in foreign.stderr
    assert "not a SQLite database" in foreign.stderr
    assert files(data) == {**before, "secret-key": files(data)["secret-key"]}

    empty = tmp_path / "empty"
    fresh = cli(empty, "manage", "migrate")
    assert fresh.returncode == 1 and "`pocolobby init` initialises it" in fresh.stderr
    assert not (empty / "pocolobby.sqlite3").exists()
