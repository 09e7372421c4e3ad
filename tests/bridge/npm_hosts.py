"""Agent hosts installed from the npm registry (Codex CLI, Gemini CLI), found for the tests
that drive them: on PATH, or under $POCOLOBBY_NPM_PREFIX (`npm install --prefix DIR ...`).

A test that needs one skips with the install command when it is missing, unless
POCOLOBBY_REQUIRE_<HOST>=1 is set (CI), where it fails instead.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

PACKAGES = {"codex": "@openai/codex", "gemini": "@google/gemini-cli"}

# Variables by which a host decides it runs in CI rather than in a person's terminal: Gemini CLI
# 0.61 runs headless under CI=true ("No input provided via stdin") and exits with status 42.
CI_MARKERS = ("CI", "GITHUB_ACTIONS", "CONTINUOUS_INTEGRATION", "BUILD_NUMBER", "RUN_ID")


def terminal_env(env: dict[str, str]) -> dict[str, str]:
    """`env` as a person's terminal has it: without the markers of a CI machine."""
    return {name: value for name, value in env.items() if name not in CI_MARKERS}


def npm_host(name: str) -> Path:
    """The host's executable, else skip (or fail when POCOLOBBY_REQUIRE_<NAME>=1)."""
    prefix = os.environ.get("POCOLOBBY_NPM_PREFIX")
    candidates = [Path(prefix) / "node_modules" / ".bin" / name] if prefix else []
    found = shutil.which(name)
    candidates += [Path(found)] if found else []
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK) and shutil.which("node"):
            return candidate
    reason = (
        f"{name} is not installed: npm install --prefix DIR {PACKAGES[name]} and set "
        "POCOLOBBY_NPM_PREFIX=DIR (or put it on PATH)"
    )
    if os.environ.get(f"POCOLOBBY_REQUIRE_{name.upper()}") == "1":
        pytest.fail(reason)
    pytest.skip(reason)
