"""One agent on a new machine: from `agent add` to its first received message, by hand-carried
file (before issue 40) and by enrolment code (after), and the commands a person types for each.

    .venv/bin/python benchmarks/team_first_day.py [--rounds 5]

Starts the real broker (`python -m pocolobby serve`, embedded SQLite, a temporary data
directory) and a sending agent, then per round adds one agent each way, the agent's machine
being a HOME of its own that knows neither the broker's data directory nor its admin token:

- before: `agent add LOBBY NAME --config F` on the broker's side, the file copied to the
  agent's machine and `chmod 600` (a local copy stands in for scp: the network leg is the
  person's, not the program's);
- after: `agent add LOBBY NAME --enroll` on the broker's side, `pocolobby join CODE --host
  shell` on the agent's machine.

Then the sender's `msg send` and the new agent's `pocolobby msg inbox` until it shows the
message. Every step is the real CLI in a subprocess, as typed; the time is wall clock from the
`agent add` to the inbox that shows the message, and the script prints the median of the
rounds and the ratio. The command counts are the lists below, taken from the docs of each
time (docs/AGENTS.md sections 3-5 before commit f30dd59, and now), for a Claude Code agent.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from tests.server import Broker, clean_env  # noqa: E402

LOBBY = "first-day"

# What a person typed to add one Claude Code agent on a new machine, from the docs of each time.
BEFORE = [
    "broker: pocolobby agent add my-team backend --config ~/.pocolobby/backend.json",
    "agent:  mkdir -p ~/.pocolobby",
    "agent:  scp broker:.pocolobby/backend.json ~/.pocolobby/   (or a password manager)",
    "agent:  chmod 600 ~/.pocolobby/backend.json",
    "agent:  cd ~/project && pocolobby connect --config ~/.pocolobby/backend.json",
    "agent:  edit .claude/settings.local.json: paste the status line and the two hooks "
    "(docs/AGENTS.md)",
    "agent:  approve the project's MCP server at Claude Code's first launch",
]
AFTER = [
    "broker: pocolobby agent add my-team backend --enroll",
    "agent:  pocolobby join CODE@URL --dir ~/project",
]


def run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "pocolobby", *args],
        cwd=REPO_ROOT,
        env=clean_env(env),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"pocolobby {' '.join(args)} failed: {done.stderr or done.stdout}")
    return done


def first_message(broker: Broker, sender: Path, name: str, config: Path, env: dict[str, str]):
    """The sender's message to `name`, then the agent's inbox until it shows it."""
    text = f"welcome, {name}"
    run(["msg", "send", "--config", str(sender), name, text], broker.cli_env())
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        inbox = json.loads(run(["msg", "inbox", "--config", str(config), "--json"], env).stdout)
        if any(m.get("content") == text for m in inbox.get("messages", [])):
            return
    raise SystemExit(f"{name} never saw its first message")


def agent_machine(root: Path, name: str) -> dict[str, str]:
    home = root / f"home-{name}"
    home.mkdir()
    return {
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "POCOLOBBY_DATA_DIR": str(home / "no-broker-here"),
        "POCOLOBBY_URL": "",
    }


def by_file(broker: Broker, root: Path, sender: Path, name: str) -> float:
    env = agent_machine(root, name)
    on_broker = root / "broker-side" / f"{name}.json"
    started = time.monotonic()
    run(["agent", "add", LOBBY, name, "--config", str(on_broker)], broker.cli_env())
    carried = Path(env["HOME"]) / ".pocolobby" / f"{name}.json"
    carried.parent.mkdir()
    shutil.copyfile(on_broker, carried)
    os.chmod(carried, 0o600)
    first_message(broker, sender, name, carried, env)
    return time.monotonic() - started


def by_code(broker: Broker, root: Path, sender: Path, name: str) -> float:
    env = agent_machine(root, name)
    started = time.monotonic()
    added = run(["agent", "add", LOBBY, name, "--enroll"], broker.cli_env())
    found = re.search(r"pocolobby join (\S+@\S+)", added.stdout)
    if found is None:
        raise SystemExit(f"no code in: {added.stdout}")
    run(["join", found.group(1), "--host", "shell"], env)
    config = Path(env["XDG_CONFIG_HOME"]) / "pocolobby" / f"{LOBBY}-{name}.json"
    first_message(broker, sender, name, config, env)
    return time.monotonic() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="pocolobby-bench-") as scratch:
        root = Path(scratch)
        (root / "broker-side").mkdir()
        broker = Broker(root / "data").start()
        try:
            sender = broker.provision(LOBBY, ["lead"], root / "configs")["lead"].path
            before, after = [], []
            for index in range(args.rounds):
                before.append(by_file(broker, root, sender, f"filed-{index}"))
                after.append(by_code(broker, root, sender, f"coded-{index}"))
        finally:
            broker.stop()
    slow, fast = statistics.median(before), statistics.median(after)
    print(f"one agent on a new machine, {args.rounds} rounds each, median wall clock:")
    print(f"  before (agent add --config, copy, chmod):  {slow:6.2f} s from agent add to inbox")
    print(f"  after  (agent add --enroll, join):         {fast:6.2f} s from agent add to inbox")
    print(f"  after / before: {fast / slow:.2f}")
    print(f"commands a person types (Claude Code agent): before {len(BEFORE)}, after {len(AFTER)}")
    for label, steps in (("before", BEFORE), ("after", AFTER)):
        print(f"  {label}:")
        for step in steps:
            print(f"    {step}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
