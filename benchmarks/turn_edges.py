"""CPU of a reported turn edge, next to a send's, and of the dispatcher's activity pass.

    .venv/bin/python benchmarks/turn_edges.py [--edges 1000] [--agents 10] [--rounds 3]

Issue 42: a turn edge (`POST /v1/turns`, from Claude Code's hooks or a tmux bridge reading its
pane) writes the board's stretch and the agent's activity row; with a coordinator watching
(`watch_agents`), the dispatcher's timer then reads the lobby's agents through the precedence
and owes the change. In one run, in this process, on a provisioned store (as
benchmarks/send_inprocess.py: the real broker provisions, then the fast lane's own function
serves each request on the process's connection, synchronous=OFF so fsync stays out):

1. A durable send (`POST /v1/messages` without runtime headers, as `pocolobby msg`).
2. A turn edge, start and end alternating, nobody watching.
3. The same with a coordinator watching every agent (each edge also wakes the dispatcher).
4. The dispatcher's activity pass (`run_activity`, its 1-second read forced each time) over a
   lobby of `--agents` agents, one of them watching.

Prints microseconds of the thread's CPU per operation (median of `--rounds`) and the ratios
to a send, all measured in this one run.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from harness import drain, provision, serve_in_process  # a sibling script

REPO_ROOT = Path(__file__).resolve().parent.parent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--edges", type=int, default=1000, help="timed operations per measure")
    parser.add_argument("--agents", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    sys.path.insert(0, str(REPO_ROOT))
    with tempfile.TemporaryDirectory(prefix="pocolobby-turns-") as temp:
        root = Path(temp)
        names = ["lead"] + [f"a{n}" for n in range(args.agents - 1)]
        configs = provision(root, names, managers=("lead",))
        lane = serve_in_process(root)
        # local: the models load only once Django is set up (above)
        from django.db import connection
        from django.utils import timezone

        from lobbies.models import Agent, AgentActivity
        from lobbies.push import activity_timer
        from tests.fast_lane import agent_post

        connection.ensure_connection()
        connection.connection.execute("PRAGMA synchronous=OFF")
        lead, worker = configs[0], configs[1]
        counter = iter(range(10**9))

        def timed(make: Any) -> float:
            spent = 0.0
            for n in range(-50, args.edges):  # 50 of warm-up, not counted
                request = make()
                began = time.thread_time()
                answer = lane._serve_api(request)
                if n >= 0:
                    spent += time.thread_time() - began
                if getattr(answer, "status_code", None) != 200:
                    raise SystemExit(f"refused: {getattr(answer, 'content', b'')[:300]!r}")
            return spent / args.edges * 1e6

        def send() -> Any:
            n = next(counter)
            body = {"to": worker["agent"], "content": "x" * 200, "client_request_id": f"s-{n}"}
            return agent_post(lead["token"], body)

        def edge() -> Any:
            event = "start" if next(counter) % 2 else "end"
            return agent_post(worker["token"], {"event": event, "host": "shell"}, "/v1/turns")

        def watching(on: bool) -> None:
            agent = Agent.objects.get(agent_id="lead", lobby__name="bench")
            AgentActivity.objects.update_or_create(
                agent=agent, defaults={"watching": [] if on else None}
            )

        def activity_pass() -> float:
            spent = 0.0
            for n in range(-5, args.edges // 10):
                activity_timer._last_read.clear()
                began = time.thread_time()
                activity_timer.run_activity(timezone.now())
                if n >= 0:
                    spent += time.thread_time() - began
            return spent / (args.edges // 10) * 1e6

        results: dict[str, list[float]] = {}
        for _ in range(args.rounds):
            drain(connection)
            watching(False)
            results.setdefault("send", []).append(timed(send))
            drain(connection)
            results.setdefault("edge", []).append(timed(edge))
            watching(True)
            results.setdefault("edge, watched", []).append(timed(edge))
            results.setdefault("activity pass", []).append(activity_pass())
        medians = {k: statistics.median(v) for k, v in results.items()}
        for label, value in medians.items():
            runs = ", ".join(f"{r:.0f}" for r in sorted(results[label]))
            ratio = value / medians["send"]
            print(
                f"{label:<14}: {value:6.0f} us of CPU ({ratio:.2f}x a send; runs {runs})",
            )
        print(f"({args.agents} agents in the lobby; synchronous=OFF; one process, one run)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
