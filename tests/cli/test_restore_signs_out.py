"""A restore resets the web too: every console session, hand-off and pending sign-in code of
the restored store is removed, and the restore's report says so. Over a real hosted broker
with email-code sign-in, on SQLite and on a PostgreSQL store of its own."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.console.hosted_server import (
    ADMIN_TOKEN,
    SIGN_IN_COOKIE,
    HostedServer,
    sign_in_cookie,
    start_hosted,
)
from tests.postgres import own_database, require_tools, url

pytestmark = pytest.mark.slow

ACCOUNT_COOKIE = "__Host-pocolobby-account"


@pytest.fixture(params=["sqlite", "postgresql"])
def store_env(request: pytest.FixtureRequest) -> Iterator[dict[str, str]]:
    """The broker's and the CLI's environment: the embedded SQLite store, or a PostgreSQL
    database of the test's own."""
    if request.param == "sqlite":
        yield {}
        return
    require_tools("pg_dump", "pg_restore")
    for database in own_database("pocolobby_signs_out"):
        yield {"DATABASE_URL": url(database)}


@pytest.fixture
def server(store_env: dict[str, str], tmp_path: Path) -> Iterator[HostedServer]:
    hosted = start_hosted(tmp_path, **store_env)
    yield hosted
    hosted.broker.stop()


def cli(server: HostedServer, env: dict[str, str], *args: str) -> str:
    result = server.broker.cli(*args, env={"POCOLOBBY_ADMIN_TOKEN": ADMIN_TOKEN, **env})
    assert result.returncode == 0, result.stderr
    return result.stdout


def cookie(answer_headers: list[str], name: str) -> str:
    for line in answer_headers:
        key, _, rest = line.partition("=")
        if key == name:
            return rest.split(";", 1)[0]
    raise AssertionError(f"no {name} cookie in {answer_headers}")


def sign_in(server: HostedServer, address: str) -> str:
    """The account-area session cookie `address` gets by signing in with its mailed code."""
    with server.client() as client:
        asked = client.post("/sign-in", json={"email": address})
        signed = client.post(
            "/sign-in/code",
            json={"email": address, "code": server.code_for(address)},
            headers={"Cookie": f"{SIGN_IN_COOKIE}={sign_in_cookie(asked)}"},
        )
    assert signed.status_code == 200, signed.text
    return cookie(signed.headers.get_list("set-cookie"), ACCOUNT_COOKIE)


def home_status(server: HostedServer, session: str) -> int:
    with server.client() as client:
        return client.get("/", headers={"Cookie": f"{ACCOUNT_COOKIE}={session}"}).status_code


def test_a_restore_signs_every_browser_out_and_says_so(
    server: HostedServer, store_env: dict[str, str], tmp_path: Path
):
    for address in ("alice@example.com", "bob@example.com"):
        server.admin("POST", "/accounts", {"email": address})
    session = sign_in(server, "alice@example.com")
    assert home_status(server, session) == 200
    with server.client() as client:  # bob's code waits in the backup, never used
        assert client.post("/sign-in", json={"email": "bob@example.com"}).status_code == 200
    backup = cli(server, store_env, "backup", "--to", str(tmp_path / "backups"))
    taken = re.search(r"^backup (\S+):", backup, re.M)
    assert taken, backup
    server.broker.stop()

    report = cli(
        server, store_env, "restore", taken.group(1), "--configs-dir", str(tmp_path / "configs")
    )

    assert (
        "every browser is signed out: 1 console sessions, 0 hand-offs and 1 pending sign-in "
        "codes of the backup removed (people sign in again)"
    ) in report
    server.broker.start()
    cli(server, store_env, "restore", "--finish")
    assert home_status(server, session) == 302  # to the sign-in page
