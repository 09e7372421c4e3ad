"""Test settings: the product's settings with a throwaway data directory."""

from __future__ import annotations

import os
import tempfile

os.environ.setdefault("POCOLOBBY_DATA_DIR", tempfile.mkdtemp(prefix="pocolobby-test-"))
os.environ.setdefault("POCOLOBBY_ADMIN_TOKEN", "pla_test-admin-token")

from pocolobby.settings import *  # noqa: F403
