"""What the store shape check costs a broker's start, before and after issue 43, in one run.

    .venv/bin/python benchmarks/store_check.py [--runs 5] [--before a47adb5]
        [--postgres postgresql://postgres@127.0.0.1:5432]

Makes a store of this release with the real `pocolobby init` (SQLite in a temporary data
directory; PostgreSQL in a scratch database when the server answers), then on that same store:

- the check alone, in this process: `lobbies.storage.discipline.diagnose` (SQLite) and
  `diagnose_postgres` of the commit `--before` (its source loaded from git: names only on
  SQLite, identity and steps only on PostgreSQL) and of this tree (the whole shape);
- a start without the server: `python -m pocolobby init` opening the existing store (the
  same work `serve` does before it listens), with the `--before` tree (exported from git) and
  with this one, alternately.

Prints medians and the ratio after/before.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import types
import uuid
from collections.abc import Callable
from io import BytesIO
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def _env(extra: dict[str, str]) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DJANGO_", "POCOLOBBY_")) and k not in {"DATABASE_URL", "REDIS_URL"}
    }
    return {**env, "POCOLOBBY_ADMIN_TOKEN": "pla_bench", **extra}


def _init(tree: Path, env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "pocolobby", "init"],
        cwd=tree, env={**env, "PYTHONPATH": str(tree)}, stdin=subprocess.DEVNULL,
        capture_output=True, timeout=300, check=True,
    )  # fmt: skip
    return time.perf_counter() - started


def _export(commit: str, into: Path) -> Path:
    archive = subprocess.run(
        ["git", "archive", commit], cwd=REPO_ROOT, capture_output=True, check=True
    ).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into


def _old_storage(commit: str) -> types.ModuleType:
    source = subprocess.run(
        ["git", "show", f"{commit}:lobbies/storage/discipline.py"],
        cwd=REPO_ROOT, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    module = types.ModuleType("old_storage")
    sys.modules["old_storage"] = module  # its dataclasses look their module up
    exec(compile(source, f"{commit}:lobbies/storage/discipline.py", "exec"), module.__dict__)  # noqa: S102
    return module


def _median_ms(call: Callable[[], object], runs: int) -> float:
    call()  # warm: imports, the first read of the description
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


def _pg_database(server: str) -> str | None:
    try:
        import psycopg

        with psycopg.connect(f"{server}/postgres", autocommit=True, connect_timeout=3) as conn:
            name = f"pocolobby_bench_{uuid.uuid4().hex[:12]}"
            conn.execute(f'CREATE DATABASE "{name}"')
            return name
    except Exception as exc:  # no server: SQLite only
        print(f"PostgreSQL not measured: {exc}")
        return None


def _drop(server: str, name: str) -> None:
    import psycopg

    with psycopg.connect(f"{server}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--before", default="a47adb5")
    parser.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="pocolobby-check-") as raw:
        folder = Path(raw)
        old_tree = _export(args.before, folder / "before")
        data = folder / "data"
        sqlite_env = _env({"POCOLOBBY_DATA_DIR": str(data)})
        _init(REPO_ROOT, sqlite_env)
        database = _pg_database(args.postgres)
        pg_env = None
        if database is not None:
            pg_env = _env(
                {
                    "POCOLOBBY_DATA_DIR": str(folder / "pgdata"),
                    "DATABASE_URL": f"{args.postgres}/{database}",
                }
            )
            _init(REPO_ROOT, pg_env)
        try:
            rows = []
            # The check alone, in this process (PostgreSQL when there is one).
            os.environ.update(pg_env or sqlite_env)
            os.environ["DJANGO_SETTINGS_MODULE"] = "pocolobby.settings"
            sys.path.insert(0, str(REPO_ROOT))
            import django

            django.setup()
            from lobbies.storage import discipline

            old = _old_storage(args.before)
            store = data / "pocolobby.sqlite3"
            rows.append(
                (
                    "SQLite check (diagnose), ms",
                    _median_ms(lambda: old.diagnose(store), args.runs * 4),
                    _median_ms(lambda: discipline.diagnose(store), args.runs * 4),
                )
            )
            if pg_env is not None:
                rows.append(
                    (
                        "PostgreSQL check (diagnose_postgres), ms",
                        _median_ms(old.diagnose_postgres, args.runs * 4),
                        _median_ms(discipline.diagnose_postgres, args.runs * 4),
                    )
                )
            # A start on the existing store, alternately before and after.
            for label, env in (("SQLite", sqlite_env), ("PostgreSQL", pg_env)):
                if env is None:
                    continue
                before, after = [], []
                for _ in range(args.runs):
                    before.append(_init(old_tree, env))
                    after.append(_init(REPO_ROOT, env))
                rows.append(
                    (
                        f"{label} `pocolobby init` opening the store, s",
                        statistics.median(before),
                        statistics.median(after),
                    )
                )
        finally:
            if database is not None:
                from django.db import connections

                connections.close_all()
                _drop(args.postgres, database)
    print(f"{'':<48} {'before':>9} {'after':>9} {'after/before':>12}")
    for label, before_value, after_value in rows:
        print(
            f"{label:<48} {before_value:>9.2f} {after_value:>9.2f} "
            f"{after_value / before_value:>12.2f}"
        )


if __name__ == "__main__":
    main()
