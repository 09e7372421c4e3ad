"""Test settings: the product's settings with a throwaway data directory."""

from __future__ import annotations

import os
import tempfile

os.environ.setdefault("POCOLOBBY_DATA_DIR", tempfile.mkdtemp(prefix="pocolobby-test-"))
os.environ.setdefault("POCOLOBBY_ADMIN_TOKEN", "pla_test-admin-token")
# A test database in a file, like the product's: WAL and the busy timeout apply. An in-memory
# shared-cache database answers a worker thread's concurrent write with "table is locked".
os.environ.setdefault(
    "POCOLOBBY_TEST_SQLITE", os.path.join(os.environ["POCOLOBBY_DATA_DIR"], "test.sqlite3")
)
# Page tests run the dashboard's background work inline: never reach the real services.
os.environ["ANTHROPIC_API_KEY"] = ""
os.environ["POCOLOBBY_GITHUB_TOKEN"] = ""
os.environ.pop("POSTMARK_TOKEN", None)
# In-process tests share one database transaction per test: keep API views on this thread.
os.environ.setdefault("POCOLOBBY_API_THREADS", "0")

from pocolobby.settings import *  # noqa: F403
