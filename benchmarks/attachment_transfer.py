"""The broker's share of an attachment: send (409) -> upload -> repeated send -> download.

    .venv/bin/python benchmarks/attachment_transfer.py [--rounds 30] [--mib 2]

Starts the real broker (`python -m pocolobby serve`, embedded SQLite, a temporary data
directory, the send rate raised), provisions a sender and a recipient with the real CLI, and
runs R rounds of the bridge's flow over one keep-alive HTTP client, each with a fresh file of
M MiB (a PNG signature and random bytes, so every round stores new content): the send with
the description (answered 409 attachment_upload_required), the upload of exactly the missing
hash, the identical send again (200 stored), then the recipient's download of the bytes. It
prints p50/p99 per step and for the whole round, and the upload throughput. The bridge's own
work (reading and checking the file, hashing, the image block) is not in it: that is
benchmarks/attachments.py, bridge side. The broker and this process share the machine;
compare lines of one run.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from tests.server import Broker  # noqa: E402

LOBBY = "bench"


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))]


def line(label: str, values: list[float]) -> str:
    return (
        f"{label:<22} p50 {percentile(values, 0.5):7.1f} ms   p99 {percentile(values, 0.99):7.1f}"
        f" ms   mean {statistics.fmean(values):7.1f} ms"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--mib", type=float, default=2.0)
    args = parser.parse_args()
    size = int(args.mib * 1024 * 1024)
    with tempfile.TemporaryDirectory(prefix="pocolobby-bench-") as scratch:
        root = Path(scratch)
        broker = Broker(root / "data", env={"POCOLOBBY_SENDS_PER_MINUTE": "100000"}).start()
        try:
            agents = broker.provision(LOBBY, ["lead", "backend"], root / "configs")
            lead, backend = agents["lead"], agents["backend"]
            steps: dict[str, list[float]] = {
                "send -> 409": [],
                "upload": [],
                "send again -> stored": [],
                "download": [],
                "round": [],
            }
            with httpx.Client(base_url=broker.url, timeout=30) as http:
                for n in range(args.rounds):
                    data = b"\x89PNG\r\n\x1a\n" + os.urandom(size - 8)
                    digest = hashlib.sha256(data).hexdigest()
                    request = {
                        "to": "backend",
                        "content": "before/after",
                        "client_request_id": f"bench-{n}",
                        "attachments": [
                            {
                                "sha256": digest,
                                "name": f"shot-{n}.png",
                                "media_type": "image/png",
                                "size": size,
                            }
                        ],
                    }
                    began = time.perf_counter()
                    first = http.post("/v1/messages", headers=lead.headers, json=request)
                    t1 = time.perf_counter()
                    assert first.status_code == 409, first.text
                    put = http.put(
                        f"/v1/attachments/{digest}",
                        content=data,
                        headers={**lead.headers, "Content-Type": "image/png"},
                    )
                    t2 = time.perf_counter()
                    assert put.status_code == 201, put.text
                    sent = http.post("/v1/messages", headers=lead.headers, json=request)
                    t3 = time.perf_counter()
                    assert sent.status_code == 200, sent.text
                    file_id = sent.json()["attachments"][0]["id"]
                    got = http.get(f"/v1/attachments/{file_id}", headers=backend.headers)
                    t4 = time.perf_counter()
                    assert got.content == data
                    for label, value in zip(
                        steps,
                        [t1 - began, t2 - t1, t3 - t2, t4 - t3, t4 - began],
                        strict=True,
                    ):
                        steps[label].append(value * 1000)
        finally:
            broker.stop()
    print(f"{args.rounds} rounds of a {args.mib:g} MiB PNG, real broker (SQLite)")
    for label, values in steps.items():
        print(line(label, values))
    mib_per_s = args.mib / (statistics.median(steps["upload"]) / 1000)
    print(f"upload throughput (median): {mib_per_s:.0f} MiB/s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
