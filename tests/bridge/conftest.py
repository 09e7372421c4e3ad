"""Fixtures shared by the bridge's tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.bridge.disk import Disk, make_disk


@pytest.fixture
def disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Disk:
    """A fake home (HOME points at it) and a scratch folder, under pytest's tmp_path."""
    return make_disk(tmp_path, monkeypatch)
