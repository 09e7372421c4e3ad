"""Two per-request costs of daphne's Twisted HTTP layer that the broker never uses, removed.

Profiled under `benchmarks/send_throughput.py`, the event loop thread spent about a sixth of
its time on them, and that thread shares the GIL with the worker threads that hold SQLite's
write slot:

- Twisted parses every POST's Content-Type through `email.message` to fill `request.args`
  with form fields. Daphne hands the raw body to the ASGI application and never reads
  `request.args`, so the parse is skipped.
- Twisted formats an access-log line for every request into its legacy log, which nothing in
  the broker observes (request logging is Django's and daphne's own, through `logging`).
"""

from __future__ import annotations

from typing import Any

from daphne import http_protocol, server


class WebRequest(http_protocol.WebRequest):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._parsePOSTFormSubmission = False


class HTTPFactory(http_protocol.HTTPFactory):
    def log(self, request: Any) -> None:
        """No access-log line (see the module docstring)."""


def install() -> None:
    """Make daphne build these classes; call before `daphne.server.Server(...).run()`."""
    # daphne's factory names WebRequest, and its Server names HTTPFactory, at call time.
    http_protocol.WebRequest = WebRequest  # type: ignore[misc]
    server.HTTPFactory = HTTPFactory  # type: ignore[misc]
