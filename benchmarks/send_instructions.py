"""Machine instructions of one durable send, counted by valgrind: a before/after that does not
swing with the machine's speed.

    .venv/bin/python benchmarks/send_instructions.py [--size 1] [CHECKOUT ...]

CPU time on this project's development machine swings by a third from one minute to the
next (docs/PERFORMANCE.md, "Instructions per send"), so a change worth a few percent cannot be
seen in it. The
number of instructions a send executes barely moves from run to run (0.2% here), and fewer
instructions is less CPU on any machine of the kind.

For each checkout (default: this one), `send_inprocess.py` serves its code under
`valgrind --tool=callgrind` twice, with 96 and 896 timed sends; the difference divided by
800 is one send's instructions, with everything the harness does once (imports, the
provisioned store, the warm-up) left out. Counted are all the process's threads: the
database thread's work and the event loop's wakes. `synchronous=OFF` as in that script;
the fsync's work is the kernel's, which callgrind does not see anyway. Needs valgrind
(`apt-get install valgrind`); one checkout takes 1-2 minutes.
"""

from __future__ import annotations

import argparse
import functools
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
HARNESS = REPO_ROOT / "benchmarks" / "send_inprocess.py"
FEW, MANY = 96, 896


def instructions(code: Path, sends: int, *, size: int) -> int:
    """Instructions the whole harness executed serving `code` for `sends` timed sends."""
    run = subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            "--callgrind-out-file=/dev/null",
            sys.executable,
            str(HARNESS),
            f"--sends={sends}",
            "--rounds=1",
            f"--sizes={size}",
            f"--code={code}",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    found = re.search(r"Collected\s*:\s*([\d,]+)", run.stderr)
    if run.returncode != 0 or found is None:
        raise SystemExit(f"the harness failed under valgrind for {code}:\n{run.stderr[-2000:]}")
    return int(found.group(1).replace(",", ""))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkouts", nargs="*", type=Path, default=[REPO_ROOT])
    parser.add_argument("--size", type=int, default=1, help="sends a commit (1: alone)")
    args = parser.parse_args(argv)
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (apt-get install valgrind)")
    counts: list[tuple[Path, float]] = []
    for code in args.checkouts:
        with ThreadPoolExecutor(max_workers=2) as pool:
            count = functools.partial(instructions, code, size=args.size)
            few, many = pool.map(count, (FEW, MANY))
        per_send = (many - few) / (MANY - FEW)
        counts.append((code, per_send))
        print(f"{code}: {per_send / 1e6:.3f} M instructions a send (size {args.size})")
    if len(counts) > 1:
        first = counts[0][1]
        for code, per_send in counts[1:]:
            print(f"{code}: {per_send / first:.3f} of {counts[0][0]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
