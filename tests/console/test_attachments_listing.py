"""The settings page lists a lobby's attachments: metadata and usage, escaped, no content."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from django.test import override_settings

from tests.console.test_local_operator import operator_browser

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256))


@pytest.fixture(autouse=True)
def attachments_dir(tmp_path: Path):
    with override_settings(ATTACHMENTS_DIR=tmp_path / "attachments"):
        yield


def test_the_settings_page_lists_names_sizes_and_usage_but_no_content(lobby, lead, backend):
    digest = hashlib.sha256(PNG).hexdigest()
    put = lead.client.put(
        f"/v1/attachments/{digest}",
        data=PNG,
        content_type="image/png",
        HTTP_AUTHORIZATION=f"Bearer {lead.token}",
    )
    assert put.status_code == 201
    name = "<b>shot<i>.png"
    lead.ok(
        "send_message",
        to="backend",
        content="see",
        client_request_id="s-1",
        attachments=[{"sha256": digest, "name": name, "media_type": "image/png", "size": len(PNG)}],
    )
    page = operator_browser().get("/my-team/settings").content.decode()
    assert 'id="attachments"' in page
    assert "&lt;b&gt;shot&lt;i&gt;.png" in page and name not in page  # escaped
    assert "264\xa0bytes of 1.0\xa0GB" in page and "1 live" in page
    assert "/v1/attachments/" not in page  # no way to the content from here
