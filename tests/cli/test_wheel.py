"""The built wheel serves its pages: the files `pocolobby serve` reads (templates, static files)
are in the wheel, and the code unpacked from it finds them there, away from any clone.

The cheap half of `.ci/wheel-check` (which also installs the wheel and its dependencies into a
clean venv): build the wheel without dependencies, unpack it, and serve from the unpacked copy
with this interpreter's installed dependencies.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.eventually import eventually
from tests.server import READY_TIMEOUT, REPO_ROOT, clean_env, free_port

pytestmark = pytest.mark.slow

PAGE_FOLDERS = ("templates", "static")
# What the build reads (.ci/wheel-check builds from the clone itself, sdist first).
BUILD_INPUTS = (
    *("pyproject.toml", "setup.py", "README.md"),
    *("lobbies", "console", "board", "pocolobby"),
    *PAGE_FOLDERS,
)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Built from a copy of what the build reads, so the clone gains no build/ or egg-info."""
    source = tmp_path_factory.mktemp("source")
    for name in BUILD_INPUTS:
        if (REPO_ROOT / name).is_dir():
            shutil.copytree(
                REPO_ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__")
            )
        else:
            shutil.copy2(REPO_ROOT / name, source / name)
    out = tmp_path_factory.mktemp("wheel")
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(source)],
        cwd=out,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert built.returncode == 0, built.stderr
    (path,) = out.glob("pocolobby-*.whl")
    return path


def test_the_wheel_carries_every_template_and_static_file(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = {
        f"pocolobby/{path.relative_to(REPO_ROOT).as_posix()}"
        for folder in PAGE_FOLDERS
        for path in (REPO_ROOT / folder).rglob("*")
        if path.is_file() and path.name != ".keep"
    }
    assert expected, "no templates or static files found in the clone"
    assert expected <= names, sorted(expected - names)


@pytest.fixture
def unpacked_broker(wheel: Path, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """`pocolobby serve` from the unpacked wheel, run in a folder that is not the clone."""
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    port = free_port()
    env = clean_env({"PYTHONPATH": str(site), "POCOLOBBY_DATA_DIR": str(tmp_path / "data")})
    where = subprocess.run(
        [sys.executable, "-c", "import pocolobby; print(pocolobby.__file__)"],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert Path(where).is_relative_to(site), f"pocolobby imported from {where}"
    log = (tmp_path / "serve.log").open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "pocolobby", "serve", "--port", str(port)],
        cwd=elsewhere,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:

        def listening() -> bool:
            log = (tmp_path / "serve.log").read_text(errors="replace")
            assert process.poll() is None, log
            return f"listening on {url}" in log

        eventually(
            listening, timeout=READY_TIMEOUT, every=0.05, what="the broker from the wheel started"
        )
        cli = subprocess.run(
            [sys.executable, "-m", "pocolobby", "lobby", "create", "wheel-team"],
            cwd=elsewhere,
            env={**env, "POCOLOBBY_URL": url},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert cli.returncode == 0, cli.stderr
        settings = subprocess.run(
            [sys.executable, "-m", "pocolobby", "settings"],
            cwd=elsewhere,
            env={**env, "POCOLOBBY_URL": url},
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        match = re.search(r"#ticket=(\S+)", settings.stdout)
        assert match, settings.stdout
        yield url, match.group(1)
    finally:
        process.terminate()
        process.wait(10)
        log.close()


def test_the_unpacked_wheel_serves_the_pages_a_static_file_and_the_openapi_document(
    unpacked_broker: tuple[str, str],
) -> None:
    url, ticket = unpacked_broker
    with httpx.Client(base_url=url, timeout=30) as client:
        signed_in = client.post("/ticket", json={"ticket": ticket}, headers={"Origin": url})
        assert signed_in.status_code == 200, signed_in.text
        # The session cookie is Secure: a browser sends it to 127.0.0.1, a cookie jar will not.
        cookie = "; ".join(c.split(";", 1)[0] for c in signed_in.headers.get_list("set-cookie"))
        for path in ("/", "/wheel-team/", "/static/pocolobby.js", "/v1/openapi.json"):
            answer = client.get(path, headers={"Cookie": cookie})
            assert answer.status_code == 200, (path, answer.status_code, answer.text[:300])
