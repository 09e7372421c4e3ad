"""Push latency through the bridge: a send's `200 stored` answer to the Channel event at the host.

    .venv/bin/python benchmarks/bridge_latency.py [--messages 300] [--ack-every 50]

Starts the real broker (`python -m pocolobby serve`, embedded SQLite, a temporary data
directory, the send-rate and queue limits raised), provisions a sender and a recipient with the
real CLI, and starts the real bridge (`python -m pocolobby bridge`) for the recipient under a
simulated Claude Code host (the mcp SDK's `ClientSession`, `tests/bridge/host.py`), which
completes the bootstrap as a model would. Then, once for `info` and once for `important`
priority, it sends M messages one at a time over a keep-alive HTTP client and measures, per
message, the time from the arrival of its `200 stored` answer to the moment the host's
notification handler receives the `notifications/claude/channel` event naming it (one clock:
time.perf_counter in this process). The recipient acknowledges through the bridge every N
messages, as a session would, outside the timed spans.

The path measured: broker commit -> dispatcher -> WebSocket frame -> bridge -> `received` ->
stdout write -> host parse. Info pushes wait the broker's batching delay
(POCOLOBBY_PUSH_BATCH_MS, 20 ms by default); important ones skip it. Target: p99 < 100 ms.

For reference it measures the same sends to a third agent whose "bridge" is a bare WebSocket
in this process (answering `received` and `host_written` at once): the broker's share of the
path. The difference between the two lines is what the bridge process and the stdio hop add.
The broker, the bridge and this process share the machine, so the figures include their
scheduling delays; compare lines of one run, not runs on different machines.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from tests.bridge.host import Host  # noqa: E402
from tests.bridge_client import Bridge as Socket  # noqa: E402
from tests.server import Broker  # noqa: E402

TARGET_P99_MS = 100.0
LOBBY = "bench"
CONTENT = "Review the auth change in api/session.py before the release branch is cut."


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))
    return ordered[index]


async def send(
    client: httpx.AsyncClient, to: str, priority: str, request_id: str
) -> tuple[int, float]:
    """One send; its message id and the moment its answer arrived."""
    response = await client.post(
        "/v1/messages",
        json={"to": to, "content": CONTENT, "client_request_id": request_id, "priority": priority},
    )
    answered = time.perf_counter()
    response.raise_for_status()
    return int(response.json()["message_id"]), answered


async def through_bridge(
    host: Host, client: httpx.AsyncClient, priority: str, count: int, ack_every: int, tag: str
) -> list[float]:
    latencies: list[float] = []
    unacknowledged: list[int] = []
    for i in range(count):
        message_id, answered = await send(client, "recipient", priority, f"{tag}-{i}")
        event = await host.message_event(message_id, timeout=30)
        latencies.append((event.at - answered) * 1000)
        unacknowledged.append(message_id)
        if len(unacknowledged) >= ack_every:
            await host.ok("acknowledge_messages", message_ids=unacknowledged)
            unacknowledged = []
        if len(host.events) > 2 * ack_every:
            del host.events[: len(host.events) - ack_every]
    if unacknowledged:
        await host.ok("acknowledge_messages", message_ids=unacknowledged)
    return latencies


async def bare_socket(
    socket: Socket,
    client: httpx.AsyncClient,
    own: httpx.AsyncClient,
    priority: str,
    count: int,
    ack_every: int,
    tag: str,
) -> list[float]:
    """The same sends to an agent whose bridge is a bare socket in this process."""
    latencies: list[float] = []
    unacknowledged: list[int] = []
    for i in range(count):
        message_id, answered = await send(client, "direct", priority, f"{tag}-{i}")
        while True:  # reminders may come between pushes; answer them and read on
            frame = await socket.frame(timeout=30)
            arrived = time.perf_counter()
            if frame.get("type") != "notice":
                continue
            await socket.send({"type": "received", "notice_id": frame["notice_id"]})
            await socket.send({"type": "host_written", "notice_id": frame["notice_id"]})
            if frame["notice_kind"] == "messages" and message_id in frame["message_ids"]:
                break
        latencies.append((arrived - answered) * 1000)
        unacknowledged.append(message_id)
        if len(unacknowledged) >= ack_every:
            response = await own.post(
                "/v1/messages/acknowledge", json={"message_ids": unacknowledged}
            )
            response.raise_for_status()
            unacknowledged = []
    if unacknowledged:
        response = await own.post("/v1/messages/acknowledge", json={"message_ids": unacknowledged})
        response.raise_for_status()
    return latencies


def report(label: str, latencies: list[float], *, judged: bool = True) -> bool:
    p50, p99 = percentile(latencies, 0.50), percentile(latencies, 0.99)
    verdict = (
        f"  p99/target {p99 / TARGET_P99_MS:.2f} ({'ok' if p99 < TARGET_P99_MS else 'OVER'})"
        if judged
        else ""
    )
    print(
        f"{label:32} n={len(latencies):4}  p50 {p50:6.1f} ms  p95 "
        f"{percentile(latencies, 0.95):6.1f} ms  p99 {p99:6.1f} ms  max {max(latencies):6.1f} ms"
        f"  mean {statistics.fmean(latencies):6.1f} ms{verdict}"
    )
    return p99 < TARGET_P99_MS


async def run(messages: int, ack_every: int) -> int:
    with tempfile.TemporaryDirectory(prefix="pocolobby-bridge-bench-") as raw:
        tmp = Path(raw)
        broker = Broker(
            tmp / "data",
            env={
                "POCOLOBBY_SENDS_PER_MINUTE": str(10 * messages + 100),
                "POCOLOBBY_QUEUED_MESSAGES": str(10 * messages + 100),
                "POCOLOBBY_NOTICES_PER_MINUTE": str(10 * messages + 100),
            },
        ).start()
        try:
            configs = await asyncio.to_thread(
                broker.provision, LOBBY, ["sender", "recipient", "direct"], tmp / "configs"
            )
            host = Host(configs["recipient"].path, str(uuid.uuid4()), tmp / "bridge.log")
            await host.start()
            socket = await Socket.connect(broker.url, configs["direct"].token)
            try:
                await host.bootstrapped()
                _, bootstrap = await socket.bootstrapped()
                await socket.report(bootstrap, "received", "host_written")
                async with (
                    httpx.AsyncClient(
                        base_url=broker.url, headers=configs["sender"].headers, timeout=30
                    ) as client,
                    httpx.AsyncClient(
                        base_url=broker.url, headers=configs["direct"].headers, timeout=30
                    ) as direct,
                ):
                    nonce = json.loads(bootstrap["content"].split("\n", 1)[1])["nonce"]
                    (await direct.post("/v1/me/ready", json={"nonce": nonce})).raise_for_status()
                    # Warm up connections and code paths; not counted.
                    await through_bridge(host, client, "important", 10, ack_every, "warm")
                    await bare_socket(
                        socket, client, direct, "important", 10, ack_every, "warm-socket"
                    )
                    print(
                        "push latency, send answered -> arrival, "
                        f"{messages} messages per line, one at a time"
                    )
                    ok = True
                    for priority in ("info", "important"):
                        latencies = await through_bridge(
                            host, client, priority, messages, ack_every, priority
                        )
                        ok = report(f"{priority}: bridge -> host", latencies) and ok
                        baseline = await bare_socket(
                            socket,
                            client,
                            direct,
                            priority,
                            messages,
                            ack_every,
                            f"socket-{priority}",
                        )
                        report(f"{priority}: broker -> bare socket", baseline, judged=False)
            finally:
                await socket.close()
                await host.close()
        finally:
            broker.stop()
    return 0 if ok else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=300)
    parser.add_argument("--ack-every", type=int, default=50)
    args = parser.parse_args()
    return asyncio.run(run(args.messages, args.ack_every))


if __name__ == "__main__":
    raise SystemExit(main())
