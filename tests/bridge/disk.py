"""A fake home and a scratch folder for the local file rules' tests (test_files.py,
test_saving.py), with sample images and a place outside every allowed one."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from pocolobby.bridge.files import FileIdentity, Places
from tests.server import REPO_ROOT

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\rIHDR" + b"\x00" * 17
JPEG = b"\xff\xd8\xff\xe0" + b"\x00" * 16
GIF = b"GIF89a" + b"\x00" * 16
WEBP = b"RIFF\x10\x00\x00\x00WEBPVP8 " + b"\x00" * 8

# A folder outside the fake home and every temporary folder, and a file in it: this
# checkout and its README.md, unless the checkout is in a temporary folder (a clone in
# /tmp); then /etc and /etc/passwd.
_IN_A_TEMPORARY_FOLDER = any(
    REPO_ROOT.resolve().is_relative_to(Path(t).resolve())
    for t in {tempfile.gettempdir(), "/tmp"}  # Places.current's temporary folders
)
OUTSIDE = Path("/etc") if _IN_A_TEMPORARY_FOLDER else REPO_ROOT
OUTSIDE_FILE = OUTSIDE / ("passwd" if _IN_A_TEMPORARY_FOLDER else "README.md")


@dataclass
class Disk:
    """A fake home and a scratch folder in the temporary folder, with writers for both."""

    home: Path
    scratch: Path
    places: Places

    def write(
        self, relative: str, data: bytes | str = "hello, world\n", *, base: Path | None = None
    ) -> Path:
        path = (base or self.home) / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data.encode() if isinstance(data, str) else data)
        return path

    def link(self, relative: str, target: Path | str) -> Path:
        path = self.home / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.symlink_to(target)
        return path


def make_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Disk:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    config = home / "PocoLobby" / "agent.json"
    config.parent.mkdir()
    config.write_text(
        '{"url": "http://127.0.0.1:8787", "token": "plt_x", "lobby": "t", "agent": "a"}'
    )
    return Disk(home, scratch, Places.current(FileIdentity.of(config)))
