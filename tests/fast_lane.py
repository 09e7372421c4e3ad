"""A /v1 request as the /v1 lane (lobbies/fastlane/lane.py) builds one from its ASGI scope, for
the tests and
benchmarks that call the fast lane's functions (`_serve_api`, `_serve_together`) directly."""

from __future__ import annotations

import io
import json
from typing import Any

from django.core.handlers.asgi import ASGIRequest


def agent_post(token: str, body: dict[str, Any], path: str = "/v1/messages") -> ASGIRequest:
    raw = json.dumps(body).encode()
    scope = {
        "type": "http",
        "method": "POST",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "headers": [
            (b"host", b"127.0.0.1"),
            (b"authorization", f"Bearer {token}".encode()),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(raw)).encode()),
        ],
        "server": ("127.0.0.1", 80),
        "client": ("127.0.0.1", 5555),
        "scheme": "http",
        "root_path": "",
        "http_version": "1.1",
    }
    return ASGIRequest(scope, io.BytesIO(raw))
