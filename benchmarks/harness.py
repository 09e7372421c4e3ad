"""What the in-process benchmarks share: how a store's rows are stamped, how Django is set up on
a built store, how a page is timed through the test client, and how the fast lane is served on
a provisioned store. One copy, so two benchmarks measured side by side measure the same way.

A sibling script, not a package: a benchmark run as `python benchmarks/NAME.py` has this
folder first on its path and imports it as `harness`.

Pages (dashboard_render.py, messages_page.py, owner_questions.py): `django_on_store(data_dir)`,
then `operator_client()` and `timed_get(client, path, runs)`.

The fast lane (send_inprocess.py, turn_edges.py): `provision(root, names)` with the real broker
and CLI, `serve_in_process(root)` for the settings a `serve` would use and a running loop for
the wakes, then `pocolobby.asgi._serve_api` on the process's connection, with
`drain(connection)` between rounds.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

WARM_RUNS = 2  # the first renders warm caches and templates; not counted


def stamp(moment: datetime) -> str:
    """A naive UTC datetime as Django's SQLite backend stores it."""
    return moment.strftime("%Y-%m-%d %H:%M:%S.%f")


def django_on_store(data_dir: Path) -> None:
    """Django set up on the SQLite store in `data_dir`, with no setting of this shell's
    (`POCOLOBBY_*`, `DATABASE_URL`) leaking in."""
    for name in [k for k in os.environ if k.startswith("POCOLOBBY_")]:
        os.environ.pop(name)
    os.environ["POCOLOBBY_DATA_DIR"] = str(data_dir)
    os.environ.pop("DATABASE_URL", None)
    os.environ["DJANGO_SETTINGS_MODULE"] = "pocolobby.settings"
    # local: the data directory and settings module are chosen above, before Django loads
    import django

    django.setup()


def operator_client() -> Any:
    """Django's test client signed in as the local operator (after `django_on_store`)."""
    # local: usable only after django.setup()
    from django.test import Client

    from console import local

    client = Client(HTTP_HOST="127.0.0.1:8787")
    client.cookies["__Host-pocolobby-operator"] = local.redeem_ticket(local.issue_ticket()) or ""
    return client


def timed_get(client: Any, path: str, runs: int) -> tuple[list[float], int, int]:
    """`runs` renders of `path` after WARM_RUNS uncounted: the milliseconds of each, and the
    queries and bytes of the last."""
    # local: usable only after django.setup()
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    times, queries, size = [], 0, 0
    for run in range(runs + WARM_RUNS):
        with CaptureQueriesContext(connection) as captured:
            began = time.perf_counter()
            response = client.get(path)
            elapsed = (time.perf_counter() - began) * 1000
        assert response.status_code == 200, response.content[:300]
        if run >= WARM_RUNS:
            times.append(elapsed)
        queries, size = len(captured), len(response.content)
    return times, queries, size


def provision(root: Path, names: list[str], managers: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """A lobby `bench` with these agents (the `managers` among them may manage rooms), made by
    the real broker and CLI, which then stops and leaves its store in `root`/data; each
    agent's config, in the order of `names`."""
    # local: the test harness is on the path only once the benchmark's main() put it there
    from tests.server import Broker

    broker = Broker(root / "data")
    broker.start()
    try:
        configs = broker.provision("bench", names, root / "configs")
        for name in managers:
            broker.cli_ok("agent", "permissions", "bench", name, "--manage-rooms", "yes")
    finally:
        broker.stop()
    return [json.loads(configs[name].path.read_text()) for name in names]


def serve_in_process(root: Path) -> Any:
    """The settings a `serve` would use on `root`/data, with the send and queue bounds lifted,
    and a running event loop for the wakes, as under `serve` (else each would start one of
    its own); the /v1 lane's module (`_serve_api`, `_serve_together`)."""
    os.environ.update(
        {
            "POCOLOBBY_DATA_DIR": str(root / "data"),
            "POCOLOBBY_LOG_LEVEL": "WARNING",
            "POCOLOBBY_SENDS_PER_MINUTE": "1000000",
            "POCOLOBBY_QUEUED_MESSAGES": "1000000",
            "POCOLOBBY_NOTICES_PER_MINUTE": "1000000",
            "DJANGO_SETTINGS_MODULE": "pocolobby.settings",
        }
    )
    # Django is set up by importing the ASGI application, after the settings above.
    importlib.import_module("pocolobby.asgi")
    # Either layout, so send_instructions.py can count a checkout from before the fast lane
    # was fenced (its /v1 lane was pocolobby.asgi, its events lobbies.events). Decided by the
    # checkout's own folders: an editable install's finder would find the other checkout's.
    lobbies = Path(importlib.import_module("lobbies").__file__ or "").parent
    fenced = (lobbies / "fastlane").is_dir()
    lane = importlib.import_module("lobbies.fastlane.lane" if fenced else "pocolobby.asgi")
    events = importlib.import_module("lobbies.push.events" if fenced else "lobbies.events")

    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()
    events.SERVER_LOOP["loop"] = loop
    return lane


def drain(connection: Any) -> None:
    """Every queue marked seen and the sends moved out of the rate window, uncounted, so the
    bound counts stay the size the default bounds allow."""
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE lobbies_delivery SET state = 'seen', agent_seen_at = delivered_at "
            "WHERE state = 'pending'"
        )
        cursor.execute(
            "UPDATE lobbies_message SET created_at = datetime(created_at, '-5 minutes')"
            " WHERE created_at > datetime('now', '-5 minutes')"
        )
