"""A 2 MiB screenshot from one agent's send to an image block on the recipient.

    .venv/bin/python benchmarks/attachments.py [--rounds 30]

Starts the real broker (`python -m pocolobby serve`, embedded SQLite, a temporary data
directory, rate limits raised), provisions agents a and b with the real CLI, and runs both
bridges (`python -m pocolobby bridge`) under simulated Claude Code hosts (`tests/bridge/host.py`)
with HOME set to a temporary home. Each round writes a new 2 MiB PNG to a temporary folder (a
2560x1440 screenshot: flat UI areas and a block of noise, so its size is what a busy
screenshot weighs), and measures on one clock (time.perf_counter in this process):

- send: a's `send_message` tool call with `attachments` until its result: the bridge checks
  and reads the file, sends the description, is answered `attachment_upload_required`,
  uploads the 2 MiB and repeats the request, which stores the message;
- push: from that result to b's host receiving the Channel event that names the attachment;
- open: b's `get_attachment` call until its result, an image block (the bridge downloads the
  2 MiB, checks its SHA-256, and scales the PNG down with Pillow to fit a tool result);
- total: send + push + open, the whole way from a's call to b's image block.

A second line re-sends the last file each round (content a already uploaded: no upload), for
the share the upload takes. The broker, both bridges and this process share the machine;
compare lines of one run, not runs on different machines.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import io
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

import mcp_types as types  # noqa: E402
from PIL import Image  # noqa: E402

from tests.bridge.host import Host  # noqa: E402
from tests.server import Broker  # noqa: E402

LOBBY = "bench"
TARGET_BYTES = 2 * 1024 * 1024


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))
    return ordered[index]


def screenshot(path: Path) -> int:
    """A 2560x1440 PNG of about 2 MiB: flat panels and one busy (noise) region."""
    image = Image.new("RGB", (2560, 1440), (246, 247, 249))
    for i, color in enumerate([(32, 33, 36), (66, 133, 244), (234, 67, 53), (251, 188, 5)]):
        image.paste(color, (40 + i * 620, 40, 600 + i * 620, 200))
    side = 836
    noise = Image.frombytes("RGB", (side, side), os.urandom(side * side * 3))
    image.paste(noise, (900, 420))
    out = io.BytesIO()
    image.save(out, "PNG")
    path.write_bytes(out.getvalue())
    return len(out.getvalue())


async def one_round(a: Host, b: Host, path: Path, tag: str) -> dict[str, float]:
    assert a.session is not None and b.session is not None
    began = time.perf_counter()
    sent = await a.ok(
        "send_message",
        to="b",
        content="before/after",
        client_request_id=tag,
        attachments=[str(path)],
    )
    stored = time.perf_counter()
    event = await b.message_event(sent["message_id"], timeout=60)
    attachment_id = event.payload["messages"][0]["attachments"][0]["id"]
    asked = time.perf_counter()
    result = await b.session.call_tool("get_attachment", {"attachment_id": attachment_id})
    opened = time.perf_counter()
    images = [c for c in result.content if isinstance(c, types.ImageContent)]
    assert not result.is_error and len(images) == 1, result
    with Image.open(io.BytesIO(base64.b64decode(images[0].data))) as shown:
        shown.load()
    await b.ok("acknowledge_messages", message_ids=[sent["message_id"]])
    if len(b.events) > 50:
        del b.events[:-10]
    return {
        "send": (stored - began) * 1000,
        "push": (event.at - stored) * 1000,
        "open": (opened - asked) * 1000,
        "total": (stored - began + event.at - stored + opened - asked) * 1000,
    }


def line(label: str, rounds: list[dict[str, float]]) -> str:
    parts = []
    for key in ("send", "push", "open", "total"):
        values = [r[key] for r in rounds]
        parts.append(
            f"{key} p50 {statistics.median(values):7.1f} p99 {percentile(values, 0.99):7.1f}"
        )
    return f"{label:<26} " + " | ".join(parts) + " (ms)"


async def main(rounds: int) -> None:
    with tempfile.TemporaryDirectory(prefix="pocolobby-attachments-") as scratch:
        root = Path(scratch)
        broker = Broker(
            root / "broker",
            env={
                "POCOLOBBY_SENDS_PER_MINUTE": "100000",
                "POCOLOBBY_QUEUED_MESSAGES": "100000",
                # Every round's push is timed: no per-minute notice cap may hold one back.
                "POCOLOBBY_NOTICES_PER_MINUTE": "100000",
            },
        ).start()
        try:
            configs = await asyncio.to_thread(broker.provision, LOBBY, ["a", "b"], root / "cfg")
            home = root / "home"
            home.mkdir()
            hosts = []
            for name in ("a", "b"):
                host = Host(
                    configs[name].path,
                    str(uuid.uuid4()),
                    root / f"{name}.log",
                    {"HOME": str(home)},
                )
                hosts.append(await host.start())
            a, b = hosts
            try:
                for host in hosts:
                    await host.bootstrapped()
                shots = root / "shots"
                shots.mkdir()
                sizes = [screenshot(shots / f"warm-{i}.png") for i in range(2)]
                for i in range(2):  # warm-up: first imports, connections, Pillow
                    await one_round(a, b, shots / f"warm-{i}.png", f"warm-{i}")
                fresh, again = [], []
                for i in range(rounds):
                    path = shots / f"shot-{i}.png"
                    sizes.append(screenshot(path))
                    fresh.append(await one_round(a, b, path, f"fresh-{i}"))
                    again.append(await one_round(a, b, path, f"again-{i}"))
            finally:
                for host in reversed(hosts):
                    await host.close()
        finally:
            broker.stop()
    print(
        f"{rounds} rounds, PNG 2560x1440 of {min(sizes) / 1048576:.2f}-"
        f"{max(sizes) / 1048576:.2f} MiB, shown reduced to fit 1 MiB"
    )
    print(line("new content (uploaded)", fresh))
    print(line("content already uploaded", again))
    ratio = statistics.median([r["send"] for r in fresh]) / statistics.median(
        [r["send"] for r in again]
    )
    print(f"send with upload / send without: {ratio:.2f}x (median)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=30)
    asyncio.run(main(parser.parse_args().rounds))
