"""The data directory is private on the default path, whoever creates it first (issue 13 §2).

Real `pocolobby init` and `pocolobby serve` subprocesses under the usual umask 022.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from lobbies.access import secret_files
from pocolobby import config
from pocolobby.cli.broker import NEXT_STEPS, address_step
from tests.lobbies.test_storage import embedded_env, make_sqlite
from tests.server import Broker


def _pocolobby(data_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pocolobby", *args],
        env=embedded_env(data_dir),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        preexec_fn=lambda: os.umask(0o022),
    )


def _modes(directory: Path) -> dict[str, int]:
    return {
        str(p.relative_to(directory)): stat.S_IMODE(p.stat().st_mode)
        for p in [directory, *directory.rglob("*")]
    }


def assert_private(directory: Path) -> None:
    modes = _modes(directory)
    assert modes["."] == 0o700, modes
    files = {name: mode for name, mode in modes.items() if name != "."}
    assert files and all(mode == 0o600 for mode in files.values()), files


def test_init_creates_a_private_directory_and_private_files(tmp_path):
    data = tmp_path / "fresh" / "data"
    result = _pocolobby(data, "init")
    assert result.returncode == 0, result.stderr
    assert {"secret-key", "admin-token", "pocolobby.sqlite3"} <= set(_modes(data))
    assert_private(data)
    assert "warning" not in result.stderr


@pytest.mark.slow
def test_serve_keeps_the_store_and_its_wal_and_shm_private(tmp_path):
    data = tmp_path / "data"
    broker = Broker(data)
    data.rmdir()  # the harness made it; here `serve` is the first to create it
    old = os.umask(0o022)
    try:
        broker.start()
    finally:
        os.umask(old)
    try:
        import httpx

        assert httpx.get(f"{broker.url}/v1/health").status_code == 200
        names = set(_modes(data))
        assert {"pocolobby.sqlite3-wal", "pocolobby.sqlite3-shm", "secret-key"} <= names
        assert_private(data)
        assert NEXT_STEPS in broker.log_text()  # what README.md says (tests/docs)
        # not on 8787, so the steps start by pointing the CLI at this broker
        assert f"  export POCOLOBBY_URL={broker.url}\n" in broker.log_text()
        assert address_step(broker.url) in broker.log_text()
    finally:
        broker.stop()


def test_an_existing_directory_open_to_others_is_tightened_with_one_warning(tmp_path):
    data = tmp_path / "data"
    assert _pocolobby(data, "init").returncode == 0
    os.chmod(data, 0o755)  # noqa: S103 - an older release left it so
    os.chmod(data / "pocolobby.sqlite3", 0o644)
    os.chmod(data / "admin-token", 0o644)
    result = _pocolobby(data, "init")
    assert result.returncode == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if "warning" in line]
    assert len(warnings) == 1 and str(data) in warnings[0], result.stderr
    assert_private(data)
    again = _pocolobby(data, "init")
    assert "warning" not in again.stderr


def test_init_refusing_a_foreign_file_leaves_nothing_new_behind(tmp_path):
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    make_sqlite(
        data / "pocolobby.sqlite3",
        "PRAGMA journal_mode = wal",
        "CREATE TABLE notes (body TEXT)",
        "INSERT INTO notes VALUES ('keep me')",
    )
    before = set(_modes(data))
    result = _pocolobby(data, "init")
    assert result.returncode == 2, result.stderr
    assert set(_modes(data)) == before


def test_a_secret_is_never_left_empty_by_a_failed_write(tmp_path, monkeypatch):
    """A write that fails before the secret is on disk (a crash, a full disk) leaves no file
    under the secret's name, and no temporary file either."""
    path = tmp_path / "data" / "admin-token"

    def disk_full(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", disk_full)
    with pytest.raises(OSError):
        secret_files.write_secret_file(path, "pla_secret")
    monkeypatch.undo()
    assert list(path.parent.iterdir()) == []
    assert secret_files.read_or_create_secret(path, prefix="pla_").startswith("pla_")


def test_an_empty_secret_file_is_replaced_not_used(tmp_path):
    path = tmp_path / "secret-key"
    path.touch()
    value = secret_files.read_or_create_secret(path)
    assert len(value) > 30 and path.read_text().strip() == value
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_a_broker_on_the_default_address_prints_no_address_step():
    assert address_step(config.DEFAULT_URL) is None
    assert address_step("http://127.0.0.1:8799") == (
        f"The CLI looks for the broker at {config.DEFAULT_URL}; in that terminal, first:\n"
        "  export POCOLOBBY_URL=http://127.0.0.1:8799"
    )
