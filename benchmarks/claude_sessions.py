"""Real Claude Code sessions in a row: how many reach `ready` with their bootstrap.

    .venv/bin/python benchmarks/claude_sessions.py [--sessions 20] [--resume-every 3]
        [--admission auto|clean-end|owner-reset] [--timeout 120] [--keep DIR]

Starts the real broker, provisions an agent with the real CLI, writes a throwaway HOME and a
project with `pocolobby connect`, and runs Claude Code from the npm registry (see
tests/bridge/claude_code.py: a loopback stand-in for the Messages API whose scripted model
calls get_context then ready on a bootstrap event) in tmux, one session after another: a
fresh conversation, then `--resume` of it, and so on (`--resume-every 3`: fresh, resume,
resume, fresh, ...). Each session must reach `ready` (the broker answered ready: true to the
nonce the session received) within --timeout; then it quits with /exit.

A fresh conversation needs the agent free: with `--admission clean-end` the broker admits it
because the previous conversation ended cleanly (issue 27's broker side); with `owner-reset`
the owner's `pocolobby agent reset-runtime` runs before it (what a broker without that rule
needs); `auto` picks clean-end when this checkout's CLI has `agent hand-over`.

Prints one line per session and `reached ready: N/M`; exits 1 unless all did. Each failed
session's debug log and the stdio tap stay in the work directory, which is printed.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from tests.bridge.claude_code import (  # noqa: E402
    MessagesAPI,
    Workspace,
    broker_admits_after_a_clean_end,
    why_unavailable,
)
from tests.server import Broker  # noqa: E402

LOBBY = "bench"
AGENT = "coder"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--resume-every", type=int, default=3)
    parser.add_argument("--admission", choices=("auto", "clean-end", "owner-reset"), default="auto")
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--keep", type=Path, default=None, help="work directory to keep")
    args = parser.parse_args()
    missing = why_unavailable()
    if missing:
        print(f"cannot run real Claude Code: {missing}", file=sys.stderr)
        return 2
    admission = args.admission
    if admission == "auto":
        admission = "clean-end" if broker_admits_after_a_clean_end() else "owner-reset"
    root = args.keep or Path(tempfile.mkdtemp(prefix="claude-sessions-"))
    root.mkdir(parents=True, exist_ok=True)
    api = MessagesAPI().start()
    broker = Broker(root / "broker").start()
    configs = broker.provision(LOBBY, [AGENT], root / "configs")
    workspace = Workspace.create(root / "claude", api, broker, configs[AGENT])
    print(f"Claude Code: {workspace.claude}; admission of fresh conversations: {admission}")
    print(f"work directory: {root}")
    reached = 0
    failed: list[str] = []
    current: str | None = None
    try:
        for index in range(args.sessions):
            fresh = current is None or index % args.resume_every == 0
            if fresh and current is not None and admission == "owner-reset":
                broker.cli_ok("agent", "reset-runtime", LOBBY, AGENT)
            name = f"s{index + 1:02d}-{'fresh' if fresh else 'resume'}"
            session = workspace.session(name, resume=None if fresh else current)
            began = time.monotonic()
            try:
                session.start(timeout=args.timeout)
                nonce = session.wait_ready(timeout=args.timeout)
                took = time.monotonic() - began
                reached += 1
                print(f"{name}: ready in {took:5.1f}s (nonce {nonce})", flush=True)
            except (TimeoutError, RuntimeError) as exc:
                failed.append(name)
                first = str(exc).splitlines()[0]
                print(f"{name}: NOT ready: {first}; see {session.debug_log}", flush=True)
            if fresh:
                current = session.session_id
            try:
                session.quit()
            except TimeoutError:
                session.kill()
    finally:
        workspace.close()
        broker.stop()
        api.stop()
    print(f"reached ready: {reached}/{args.sessions}")
    if not failed and args.keep is None:
        shutil.rmtree(root, ignore_errors=True)
    return 0 if reached == args.sessions else 1


if __name__ == "__main__":
    sys.exit(main())
