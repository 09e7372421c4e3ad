"""docs/OPERATIONS.md's systemd unit is one `systemd-analyze verify` accepts without a
warning, and keeps the hardening the page explains."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HEADING = "# /etc/systemd/system/pocolobby.service"
# The one placeholder replaced: where `pocolobby` is installed.
INSTALLED = "/usr/local/bin/pocolobby"


def doc_unit() -> str:
    text = (ROOT / "docs" / "OPERATIONS.md").read_text()
    blocks = re.findall(r"^```[^\n]*\n(.*?)^```", text, re.S | re.M)
    (unit,) = [block for block in blocks if block.startswith(HEADING)]
    return unit


def test_the_unit_keeps_its_hardening():
    lines = set(doc_unit().splitlines())
    for option in ("NoNewPrivileges=yes", "ProtectSystem=strict", "PrivateTmp=yes"):
        assert option in lines, option
    assert "ReadWritePaths=/var/lib/pocolobby" in lines  # the data directory stays writable


def test_systemd_analyze_verify_accepts_the_unit_without_a_warning(tmp_path: Path):
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is missing (Debian's systemd package has it)")
    unit = doc_unit()
    assert INSTALLED in unit
    executable = Path(sys.executable).with_name("pocolobby")
    path = tmp_path / "pocolobby.service"
    path.write_text(unit.replace(INSTALLED, str(executable)))
    result = subprocess.run(
        [analyze, "verify", "--man=no", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (result.returncode, result.stdout + result.stderr) == (0, "")
