"""Test-only: every `*.localhost` name resolves to loopback, in any Python process started
with this directory on PYTHONPATH (the deployment tests' bridges).

RFC 6761 reserves `localhost.` and its subdomains for loopback; Chromium and
systemd-resolved answer them so, glibc's `files` lookup does not. This does what they do,
for this process only, without touching the machine's resolver.
"""

from __future__ import annotations

import socket
from typing import Any

_real_getaddrinfo = socket.getaddrinfo


def _loopback_for_localhost(host: Any, *args: Any, **kwargs: Any) -> Any:
    name = host.decode() if isinstance(host, bytes) else host
    if isinstance(name, str) and name.lower().rstrip(".").endswith(".localhost"):
        host = "127.0.0.1"
    return _real_getaddrinfo(host, *args, **kwargs)


socket.getaddrinfo = _loopback_for_localhost
