"""The operator's commands talk to a serving broker over its admin API (it holds the store's
lock): the client, agent configuration files and the tables they print."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import httpx

from lobbies.wire.terminal import for_terminal as shown
from pocolobby import config
from pocolobby.bridge.config import is_loopback
from pocolobby.cli.common import CliError


def broker_url() -> str:
    """The broker the operator's commands talk to (and agents' configurations name)."""
    return os.environ.get("POCOLOBBY_URL", config.DEFAULT_URL).rstrip("/")


def admin_client() -> httpx.Client:
    token = os.environ.get("POCOLOBBY_ADMIN_TOKEN")
    if not token:
        path = config.data_dir() / "admin-token"
        try:
            token = path.read_text().strip()
        except FileNotFoundError:
            raise CliError(
                f"no admin token at {path}: start the broker (pocolobby serve) with the same "
                "data directory, or set POCOLOBBY_ADMIN_TOKEN"
            ) from None
    url = broker_url()
    if urlsplit(url).scheme.casefold() == "http" and not is_loopback(url):
        raise CliError(
            f"POCOLOBBY_URL {url} is plain http to another machine, which would send the "
            "admin token unencrypted; nothing was sent. Use the broker's https:// address, or "
            "reach it through an SSH tunnel (ssh -N -L 8787:127.0.0.1:8787 HOST, then "
            "POCOLOBBY_URL=http://127.0.0.1:8787)"
        )
    return httpx.Client(
        base_url=f"{url}/v1/admin", headers={"Authorization": f"Bearer {token}"}, timeout=30
    )


class Refused(CliError):
    """The broker answered with a refusal: it changed nothing."""


def call(method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    with admin_client() as client:
        try:
            response = client.request(method, path, json=body)
        except httpx.TransportError as exc:
            raise CliError(
                f"cannot reach the broker at {client.base_url} ({exc}); is `pocolobby serve` "
                "running, and is POCOLOBBY_URL right?"
            ) from None
    try:
        data: dict[str, Any] = response.json()
    except ValueError:
        raise CliError(f"the broker answered {response.status_code} without JSON") from None
    if response.is_error:
        error = data.get("error", {})
        raise Refused(f"{error.get('message', response.reason_phrase)} ({error.get('code')})")
    return data


class ConfigFile:
    """The agent's configuration file, prepared before the broker is asked for a token.

    The temporary file exists (mode 0600) before the request, so a token the broker issues is
    never lost to an unwritable directory; it is renamed into place once written.
    """

    def __init__(self, raw: str, *, replace: bool) -> None:
        self.path = Path(raw).expanduser().resolve()
        if not self.path.parent.is_dir():
            raise CliError(f"{self.path.parent} is not a directory")
        if self.path.exists() and not replace:
            raise CliError(f"{self.path} exists; choose another --config path")
        try:
            fd, temp = tempfile.mkstemp(
                dir=self.path.parent, prefix=f".{self.path.name}.", suffix=".tmp"
            )
        except OSError as exc:
            raise CliError(f"cannot write in {self.path.parent}: {exc.strerror}") from None
        os.fchmod(fd, 0o600)
        self.fd, self.temp = fd, Path(temp)

    def write(self, answer: dict[str, Any], url: str | None = None) -> None:
        """Write {"url","token","lobby","agent"}, fsync, and rename into place; `url` is the
        broker's as the agent reaches it (default: the operator's POCOLOBBY_URL)."""
        url = url or broker_url()
        content = json.dumps(
            {
                "url": url,
                "token": answer["token"],
                "lobby": answer["lobby"],
                "agent": answer["agent"],
            },
            indent=2,
        )
        with os.fdopen(self.fd, "w") as handle:
            handle.write(content + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(self.temp, self.path)

    def discard(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)
        self.temp.unlink(missing_ok=True)


def issue_into(config_file: ConfigFile, method: str, path: str, body: Any = None) -> None:
    try:
        config_file.write(call(method, path, body))
    except BaseException:
        config_file.discard()
        raise


def segment(value: str) -> str:
    """A name as one URL path segment: `a/b` must not reach another route."""
    return quote(value, safe="")


def read_role(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CliError(f"cannot read the role file {path}: {exc}") from None


def table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    if not rows:
        return "(none)"
    cells = [[("" if r.get(c) is None else shown(r.get(c))) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)) for row in cells]
    return "\n".join(line.rstrip() for line in lines)
