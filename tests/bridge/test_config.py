"""The bridge's runtime id and its configuration file (pocolobby/bridge/config.py), in-process."""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path

import pytest

from pocolobby.bridge.config import (
    ConfigError,
    Runtime,
    derive_runtime_id,
    load_config,
    runtime_for,
)

BROKER_RUNTIME_ID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def test_the_runtime_id_is_a_version_8_uuid_derived_from_token_and_session():
    runtime = derive_runtime_id("plt_secret", "5f0c3c1e-session")
    parsed = uuid.UUID(runtime)
    assert parsed.version == 8 and parsed.variant == uuid.RFC_4122
    assert BROKER_RUNTIME_ID.match(runtime) and runtime == runtime.lower()
    assert derive_runtime_id("plt_secret", "5f0c3c1e-session") == runtime  # a resume
    assert derive_runtime_id("plt_secret", "another-session") != runtime  # a new conversation
    assert derive_runtime_id("plt_rotated", "5f0c3c1e-session") != runtime  # a new credential


def test_the_runtime_id_is_hmac_sha256_keyed_by_the_token():
    import hashlib
    import hmac

    digest = hmac.new(b"plt_k", b"s-1", hashlib.sha256).digest()[:16]
    runtime = uuid.UUID(derive_runtime_id("plt_k", "s-1")).bytes
    masks = {6: 0x0F, 8: 0x3F}  # the version and variant bits are ours
    assert all(
        (a & masks.get(i, 0xFF)) == (b & masks.get(i, 0xFF))
        for i, (a, b) in enumerate(zip(runtime, digest, strict=True))
    )


def test_without_a_session_id_each_process_gets_a_random_runtime():
    first = runtime_for("plt_k", {})
    second = runtime_for("plt_k", {"CLAUDE_CODE_SESSION_ID": "  "})
    assert first.scope == second.scope == "process"
    assert first.runtime_id != second.runtime_id
    assert uuid.UUID(first.runtime_id).version == 4
    resumed = runtime_for("plt_k", {"CLAUDE_CODE_SESSION_ID": "s-1"})
    assert resumed == Runtime(derive_runtime_id("plt_k", "s-1"), "conversation")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "no agent configuration"),
        ("not json", "is not JSON"),
        ("[]", "not a JSON object"),
        ('{"url": "http://x", "token": "t", "lobby": "l"}', "no string 'agent'"),
        ('{"url": "ftp://x", "token": "t", "lobby": "l", "agent": "a"}', "url must start"),
    ],
)
def test_a_bad_configuration_file_is_named(tmp_path: Path, content: str | None, message: str):
    path = tmp_path / "agent.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ConfigError, match=message):
        load_config(path)


@pytest.mark.parametrize(
    "url",
    ["http://10.0.0.5:8787", "http://lobby.example", "http://0.0.0.0:8787", "http://[::ffff:1]"],
)
def test_plain_http_to_another_machine_is_refused_with_the_fix(tmp_path: Path, url: str):
    path = tmp_path / "agent.json"
    path.write_text(json.dumps({"url": url, "token": "plt_x", "lobby": "l", "agent": "a"}))
    with pytest.raises(ConfigError) as refused:
        load_config(path)
    assert "https://" in str(refused.value) and "SSH tunnel" in str(refused.value)
    assert "plt_x" not in str(refused.value)


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8787",
        "http://127.3.4.5",
        "http://localhost:8787/",
        "http://LOCALHOST",
        "http://[::1]:8787",
        "https://lobby.example",
    ],
)
def test_loopback_http_and_any_https_are_accepted(tmp_path: Path, url: str):
    path = tmp_path / "agent.json"
    path.write_text(json.dumps({"url": url, "token": "plt_x", "lobby": "l", "agent": "a"}))
    assert load_config(path).url == url.rstrip("/")


def test_the_configuration_never_shows_its_token(tmp_path: Path):
    path = tmp_path / "agent.json"
    path.write_text(
        json.dumps({"url": "https://h:1/", "token": "plt_SECRET", "lobby": "l", "agent": "a"})
    )
    config = load_config(path)
    assert config.url == "https://h:1" and "plt_SECRET" not in repr(config)
