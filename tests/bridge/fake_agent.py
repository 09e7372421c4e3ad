"""A stand-in agent REPL for tmux delivery tests: prints a prompt, reads lines, logs each one;
`busy N` makes it work N seconds with no prompt showing, as an agent mid-turn."""

from __future__ import annotations

import sys
import time


def main(log_path: str) -> None:
    with open(log_path, "a", buffering=1, encoding="utf-8") as log:
        while True:
            sys.stdout.write("> ")
            sys.stdout.flush()
            line = sys.stdin.readline()
            if not line:
                return
            line = line.rstrip("\n")
            log.write(line + "\n")
            if line.startswith("busy "):
                print("working...", flush=True)
                time.sleep(float(line.split()[1]))


if __name__ == "__main__":
    main(sys.argv[1])
