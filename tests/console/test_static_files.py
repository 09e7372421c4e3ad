"""Static files under ASGI: served with an async body, so ordinary page use logs no Django
StreamingHttpResponse warning; the pages name a favicon."""

from __future__ import annotations

import warnings

import pytest
from django.test import AsyncClient

from tests.board.dashboard_helpers import LOCAL_HOST, operator_client

pytestmark = pytest.mark.django_db


@pytest.mark.asyncio
async def test_a_static_file_streams_asynchronously_without_a_warning():
    client = AsyncClient(HTTP_HOST=LOCAL_HOST)
    for path in ("/static/pocolobby.css", "/static/favicon.svg"):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            response = await client.get(path)
            assert response.status_code == 200 and response.is_async
            body = b"".join([chunk async for chunk in response])
        assert body.startswith(b":root" if path.endswith(".css") else b"<svg")


def test_every_page_names_the_favicon(lobby):
    html = operator_client().get("/my-team/").content.decode()
    assert '<link rel="icon" href="/static/favicon.svg"' in html
