"""What the shared commit buys: durable sends through the broker with and without it, one run.

    .venv/bin/python benchmarks/shared_commit.py [--sends 1000] [--threads 8] [--rounds 3]

The shared commit (lobbies/fastlane/lane.py, `_serve_together`) is why a /v1 view may run twice (a
batch with one failing request is served again, each request in a savepoint), so every
action must obey "an action may run twice". This measures whether it still pays.

Starts two real brokers (`python -m pocolobby serve`, embedded SQLite, each its own
temporary data directory), one with `POCOLOBBY_SHARED_COMMIT=0` (each request commits
alone), one with the default; provisions the same lobby and agents on each; then times
`--sends` `POST /v1/messages` from `--threads` keep-alive clients against each in turn,
`--rounds` times, alternating (so a slow moment of the shared machine hits both). Prints,
per round and as medians: sends/s, the broker's CPU per send (user + system from
/proc/<pid>/stat) and latency p99, and the ratios shared / alone.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from send_throughput import LOBBY, cpu_seconds, http_sends, percentile

from tests.server import Broker

MODES = {"alone": "0", "shared": "1"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sends", type=int, default=1000, help="timed sends a round")
    parser.add_argument("--threads", type=int, default=8, help="concurrent HTTP clients")
    parser.add_argument("--agents", type=int, default=4, help="agents sending to each other")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds of each mode")
    parser.add_argument("--warmup", type=int, default=200, help="untimed sends first")
    args = parser.parse_args(argv)
    total = args.warmup + args.sends * args.rounds
    figures: dict[str, list[tuple[float, float, float]]] = {mode: [] for mode in MODES}

    with tempfile.TemporaryDirectory(prefix="pocolobby-shared-commit-") as temp:
        root = Path(temp)
        brokers, configs = {}, {}
        try:
            for mode, flag in MODES.items():
                env = {
                    "POCOLOBBY_SENDS_PER_MINUTE": str(10 * total + 1000),
                    "POCOLOBBY_QUEUED_MESSAGES": str(10 * total + 1000),
                    "POCOLOBBY_LOG_LEVEL": "WARNING",
                    "POCOLOBBY_SHARED_COMMIT": flag,
                }
                broker = Broker(root / mode, env=env, log_path=root / f"{mode}.log")
                broker.start()
                brokers[mode] = broker
                names = [f"agent-{n}" for n in range(args.agents)]
                configs[mode] = broker.provision(LOBBY, names, root / f"{mode}-configs")
                http_sends(configs[mode], args.warmup, args.threads, "warmup")
            for round_ in range(args.rounds):
                order = list(MODES) if round_ % 2 == 0 else list(reversed(MODES))
                for mode in order:
                    pid = brokers[mode].pid
                    before = cpu_seconds(pid)
                    seconds, latencies = http_sends(
                        configs[mode], args.sends, args.threads, f"r{round_}"
                    )
                    cpu = cpu_seconds(pid) - before
                    rate = args.sends / seconds
                    cpu_ms = cpu / args.sends * 1000
                    p99 = percentile(latencies, 0.99) * 1000
                    figures[mode].append((rate, cpu_ms, p99))
                    print(
                        f"round {round_ + 1} {mode:6}: {rate:7,.0f} sends/s, "
                        f"{cpu_ms:.2f} ms CPU a send, p99 {p99:.1f} ms"
                    )
        except BaseException:
            for broker in brokers.values():
                print(broker.log_text()[-2000:], file=sys.stderr)
            raise
        finally:
            for broker in brokers.values():
                broker.stop()

    def median(mode: str, column: int) -> float:
        return statistics.median(row[column] for row in figures[mode])

    rate = {mode: median(mode, 0) for mode in MODES}
    cpu = {mode: median(mode, 1) for mode in MODES}
    p99 = {mode: median(mode, 2) for mode in MODES}
    print(
        f"medians alone : {rate['alone']:,.0f} sends/s, {cpu['alone']:.2f} ms CPU, "
        f"p99 {p99['alone']:.1f} ms"
    )
    print(
        f"medians shared: {rate['shared']:,.0f} sends/s, {cpu['shared']:.2f} ms CPU, "
        f"p99 {p99['shared']:.1f} ms"
    )
    print(
        f"ratio shared/alone: sends/s {rate['shared'] / rate['alone']:.2f}, "
        f"CPU a send {cpu['shared'] / cpu['alone']:.2f}, p99 {p99['shared'] / p99['alone']:.2f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
