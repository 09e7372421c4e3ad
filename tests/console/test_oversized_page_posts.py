"""A page POST too large to read (over DATA_UPLOAD_MAX_MEMORY_SIZE, or a form over its field
count) is 413 with a plain page and one log line, on every page host; never Django's 400
with a traceback in the log. Over a real server, reading its log."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.console.conftest import DOMAIN
from tests.console.hosted_server import HostedServer, hosted_server

__all__ = ["hosted_server"]  # a fixture used here by name

BIG = b'{"email": "' + b"a" * 300_000 + b'"}'


def chunked(body: bytes) -> Iterator[bytes]:
    """The body without a Content-Length (Transfer-Encoding: chunked)."""
    for start in range(0, len(body), 65_536):
        yield body[start : start + 65_536]


@pytest.mark.slow
def test_oversized_page_posts_are_413_with_one_log_line_and_no_traceback(
    hosted_server: HostedServer,
):
    json_type = {"Content-Type": "application/json"}
    form_type = {"Content-Type": "application/x-www-form-urlencoded"}
    many_fields = "&".join(f"f{n}=x" for n in range(1_500)).encode()
    asks = [
        (DOMAIN, "/sign-in", BIG, json_type),
        (DOMAIN, "/sign-in/code", chunked(BIG), json_type),
        (DOMAIN, "/admin/login/", b"username=" + b"a" * 300_000, form_type),
        (DOMAIN, "/admin/login/", many_fields, form_type),
        (f"team.{DOMAIN}", "/reply", BIG, json_type),
        (f"team.{DOMAIN}", "/settings/visibility", chunked(BIG), json_type),
    ]
    for host, path, body, headers in asks:
        with hosted_server.client(host) as client:
            answer = client.post(path, content=body, headers=headers)
        assert answer.status_code == 413, (path, answer.status_code, answer.text)
        assert answer.headers["content-type"] == "text/plain; charset=utf-8"
        assert "this form is larger than this broker takes" in answer.text
    log = hosted_server.broker.log_text()
    refused = [line for line in log.splitlines() if "pocolobby.pages refused POST" in line]
    assert len(refused) == len(asks), log
    assert "Traceback" not in log and "django.security" not in log, log
    # A form of an ordinary size still reaches its page.
    with hosted_server.client() as client:
        assert client.post("/sign-in", json={"email": "a@example.com"}).status_code == 200
