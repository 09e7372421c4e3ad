"""A stdio tap between an MCP host and its server: `python stdio_tap.py LOG -- CMD ARGS...`.

Runs CMD with pipes, relays every line both ways unchanged, and appends each to LOG with the
wall-clock time and a direction (`>>` host to server, `<<` server to host, `**` the tap's own
facts: start, the host's environment names that steer a server, signals, exit). Used by the
real-Claude-Code tests to see exactly what Claude Code sends and when; standard library only.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from typing import IO, Any

# The environment a host sets for its servers that tells sessions and health checks apart.
SHOWN = ("CLAUDE_CODE_ENTRYPOINT", "CLAUDE_CODE_SESSION_ID", "CLAUDECODE", "TMUX_PANE")


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[2] != "--":
        print("usage: stdio_tap.py LOG -- CMD [ARGS...]", file=sys.stderr)
        return 2
    log = open(argv[1], "a", buffering=1)  # noqa: SIM115 - open for the life of the process
    lock = threading.Lock()

    def stamp(direction: str, line: bytes) -> None:
        with lock:
            log.write(f"{time.time():.3f} {direction} {line.decode(errors='replace').rstrip()}\n")

    try:
        with open(f"/proc/{os.getppid()}/cmdline", "rb") as cmdline:
            parent = cmdline.read().replace(b"\0", b" ")
    except OSError:
        parent = b"?"
    shown = " ".join(f"{k}={os.environ[k]}" for k in SHOWN if k in os.environ)
    stamp("**", f"start pid={os.getpid()} {shown} parent={parent.decode().strip()}".encode())
    child = subprocess.Popen(argv[3:], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert child.stdin is not None and child.stdout is not None
    child_in: IO[bytes] = child.stdin

    def upstream() -> None:
        for line in iter(sys.stdin.buffer.readline, b""):
            stamp(">>", line)
            try:
                child_in.write(line)
                child_in.flush()
            except OSError:
                break
        stamp("**", b"host closed stdin")
        child_in.close()

    def forward(signum: int, frame: Any) -> None:
        stamp("**", f"signal {signal.Signals(signum).name}".encode())
        child.send_signal(signum)

    signal.signal(signal.SIGINT, forward)
    signal.signal(signal.SIGTERM, forward)
    threading.Thread(target=upstream, daemon=True).start()
    for line in iter(child.stdout.readline, b""):
        stamp("<<", line)
        sys.stdout.buffer.write(line)
        sys.stdout.buffer.flush()
    code = child.wait()
    stamp("**", f"server exit {code}".encode())
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv))
