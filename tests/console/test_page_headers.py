"""What every page carries: a CSP whose nonce is the one on the page's scripts, no inline
script allowed; a refused Host answered plainly, with nothing but a line in the log."""

from __future__ import annotations

import logging
import re

import pytest
from django.test import Client

pytestmark = pytest.mark.django_db


def test_the_csp_names_this_pages_nonce_and_allows_no_inline_script() -> None:
    response = Client(HTTP_HOST="127.0.0.1:8787").get("/")
    policy = response["Content-Security-Policy"]
    nonces = set(re.findall(r'<script nonce="([^"]+)"', response.content.decode()))
    assert len(nonces) == 1
    script_src = re.search(r"script-src ([^;]+)", policy).group(1).split()
    assert f"'nonce-{nonces.pop()}'" in script_src
    assert "'unsafe-inline'" not in policy and "'unsafe-eval'" not in policy
    assert "'nonce'" not in script_src  # the placeholder was replaced


def test_a_host_django_does_not_allow_is_refused_without_a_traceback(caplog) -> None:
    with caplog.at_level(logging.DEBUG):
        response = Client(HTTP_HOST="evil.example:8787").get("/")
    assert response.status_code == 400
    assert "127.0.0.1:8787" in response.content.decode()
    assert not [r for r in caplog.records if r.exc_info]
