"""Pane latency: a send's `200 stored` answer to its notice line arriving in an idle tmux pane.

    .venv/bin/python benchmarks/pane_latency.py [--messages 100]

Starts the real broker (`python -m pocolobby serve`, embedded SQLite, a temporary data
directory), provisions a sender and two recipients with the real CLI, starts a private tmux
server whose one pane runs the fake agent REPL of the tests (tests/bridge/fake_agent.py: a
`> ` prompt, each line it reads appended to a log file), and starts the real bridge with
`--deliver tmux --pane %N` under a simulated MCP host. A second recipient runs the bridge in
its default Channel mode, for reference. Then it sends M important messages to each, one at a
time, and measures per message the time from the arrival of the `200 stored` answer to:

- tmux: the notice line naming the message in the agent's log, i.e. typed with `send-keys -l`,
  Enter pressed, and read by the agent (the log is polled every millisecond);
- channel: the host's notification handler receiving the Channel event naming it.

Each message is acknowledged through its bridge before the next is sent, outside the timed
span, so the pane is idle for every send. The path measured for tmux: broker commit ->
WebSocket frame -> bridge -> pane lock (flock) -> `display-message` and `capture-pane` (the
idle check) -> `send-keys -l` -> `send-keys Enter` -> the agent's read. Each tmux call is a
process spawn; the ratio of the two lines is what typing into a pane costs over a Channel.
Everything shares the machine; compare lines of one run, not runs on different machines.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from tests.bridge.host import Host  # noqa: E402
from tests.server import Broker  # noqa: E402

LOBBY = "bench"
CONTENT = "Review the auth change in api/session.py before the release branch is cut."
FAKE_AGENT = REPO_ROOT / "tests" / "bridge" / "fake_agent.py"


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))
    return ordered[index]


async def send(client: httpx.AsyncClient, to: str, request_id: str) -> tuple[int, float]:
    response = await client.post(
        "/v1/messages",
        json={
            "to": to,
            "content": CONTENT,
            "client_request_id": request_id,
            "priority": "important",
        },
    )
    answered = time.perf_counter()
    response.raise_for_status()
    return int(response.json()["message_id"]), answered


async def line_in_log(log: Path, message_id: int, timeout: float = 30.0) -> float:
    """The moment a line naming `message_id` is in the agent's log."""
    wanted = f"ids {message_id} "
    deadline = time.perf_counter() + timeout
    while time.perf_counter() < deadline:
        if wanted in log.read_text():
            return time.perf_counter()
        await asyncio.sleep(0.001)
    raise AssertionError(f"message {message_id} never reached the pane")


async def through_pane(
    host: Host, client: httpx.AsyncClient, log: Path, count: int, tag: str
) -> list[float]:
    latencies = []
    for i in range(count):
        message_id, answered = await send(client, "paned", f"{tag}-{i}")
        arrived = await line_in_log(log, message_id)
        latencies.append((arrived - answered) * 1000)
        await host.ok("acknowledge_messages", message_ids=[message_id])
    return latencies


async def through_channel(
    host: Host, client: httpx.AsyncClient, count: int, tag: str
) -> list[float]:
    latencies = []
    for i in range(count):
        message_id, answered = await send(client, "channeled", f"{tag}-{i}")
        event = await host.message_event(message_id, timeout=30)
        latencies.append((event.at - answered) * 1000)
        await host.ok("acknowledge_messages", message_ids=[message_id])
        del host.events[:-5]
    return latencies


def report(label: str, latencies: list[float]) -> float:
    p50, p99 = percentile(latencies, 0.50), percentile(latencies, 0.99)
    print(
        f"{label:28} n={len(latencies):4}  p50 {p50:6.1f} ms  p95 "
        f"{percentile(latencies, 0.95):6.1f} ms  p99 {p99:6.1f} ms  max {max(latencies):6.1f} ms"
        f"  mean {statistics.fmean(latencies):6.1f} ms"
    )
    return p50


def tmux(socket: Path, *args: str) -> str:
    return subprocess.run(
        ["tmux", "-S", str(socket), *args], capture_output=True, text=True, check=True, timeout=10
    ).stdout


async def run(messages: int) -> int:
    with tempfile.TemporaryDirectory(prefix="pocolobby-pane-bench-") as raw:
        tmp = Path(raw)
        socket = tmp / "tmux.sock"
        log = tmp / "typed.log"
        broker = Broker(
            tmp / "data",
            env={
                "POCOLOBBY_SENDS_PER_MINUTE": str(10 * messages + 100),
                "POCOLOBBY_QUEUED_MESSAGES": str(10 * messages + 100),
            },
        ).start()
        command = f"{sys.executable} {FAKE_AGENT} {log}"
        tmux(socket, "new-session", "-d", "-s", "agent", "-x", "200", "-y", "40", command)
        pane = tmux(socket, "list-panes", "-t", "agent", "-F", "#{pane_id}").strip()
        try:
            configs = await asyncio.to_thread(
                broker.provision, LOBBY, ["sender", "paned", "channeled"], tmp / "configs"
            )
            paned = Host(
                configs["paned"].path,
                str(uuid.uuid4()),
                tmp / "paned.log",
                extra_env={"TMUX": f"{socket},0,0"},
                bridge_args=["--deliver", "tmux", "--pane", pane],
            )
            channeled = Host(configs["channeled"].path, str(uuid.uuid4()), tmp / "channel.log")
            await paned.start()
            await channeled.start()
            try:
                await channeled.bootstrapped()
                while "nonce" not in log.read_text() if log.exists() else True:
                    await asyncio.sleep(0.05)
                nonce = log.read_text().splitlines()[0].rsplit("with nonce ", 1)[1].split()[0]
                await paned.ok("get_context")
                await paned.ok("ready", nonce=nonce)
                async with httpx.AsyncClient(
                    base_url=broker.url, headers=configs["sender"].headers, timeout=30
                ) as client:
                    await through_pane(paned, client, log, 5, "warm")  # not counted
                    await through_channel(channeled, client, 5, "warm-channel")
                    print(
                        "send answered -> notice at the agent, important priority, "
                        f"{messages} messages per line, one at a time, idle pane"
                    )
                    pane_p50 = report(
                        "tmux: line read in the pane",
                        await through_pane(paned, client, log, messages, "pane"),
                    )
                    channel_p50 = report(
                        "channel: event at the host",
                        await through_channel(channeled, client, messages, "channel"),
                    )
                    print(f"p50 tmux / p50 channel: {pane_p50 / channel_p50:.2f}")
            finally:
                await channeled.close()  # each host's task scopes close in reverse order
                await paned.close()
        finally:
            subprocess.run(["tmux", "-S", str(socket), "kill-server"], check=False, timeout=10)
            socket.unlink(missing_ok=True)
            broker.stop()
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=100)
    args = parser.parse_args()
    return asyncio.run(run(args.messages))


if __name__ == "__main__":
    raise SystemExit(main())
