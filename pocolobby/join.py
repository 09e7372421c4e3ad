"""`pocolobby join CODE`: the agent's machine redeems the operator's one-time code for the
agent's token, writes its configuration (mode 0600) and sets the host up as `connect` does, so
an agent on a new machine costs one command and no file carried by hand.

The code (`XXXX-XXXX-XXXX-XXXX-XXXX@https://broker`) names the broker; `--url` overrides that.
The broker is reached under the bridge's TLS rule: plain http only on this machine's loopback.
A refused code writes nothing.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import platformdirs

from lobbies.wire.terminal import for_terminal as shown
from pocolobby.bridge.config import is_loopback
from pocolobby.bridge.connect import ConnectError, connect
from pocolobby.cli.admin_client import ConfigFile
from pocolobby.cli.common import CliError

JOIN_TIMEOUT_SECONDS = 20.0


def config_dir() -> Path:
    """Where agents' configurations live on this machine unless --config says otherwise."""
    return Path(platformdirs.user_config_dir("pocolobby"))


def split_code(raw: str, url: str | None) -> tuple[str, str]:
    """The code's secret and the broker's URL (`--url` wins over the one after `@`)."""
    secret, _, named = raw.strip().partition("@")
    broker = (url or named).strip().rstrip("/")
    if not secret:
        raise CliError("the code is empty: paste what `pocolobby agent enroll` printed")
    if not broker:
        raise CliError(
            "the code names no broker: paste it whole (CODE@URL) or add --url https://..."
        )
    parts = urlsplit(broker)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise CliError(f"{shown(broker)} is not an http(s) URL of a broker")
    if parts.scheme == "http" and not is_loopback(broker):
        raise CliError(
            f"refusing plain http to {shown(broker)}: the token would cross the network in "
            "clear; use the broker's https address (docs/OPERATIONS.md, TLS)"
        )
    return secret, broker


def redeem(secret: str, url: str) -> dict[str, str]:
    """The broker's `{"lobby", "agent", "token"}` for the code, or CliError saying why not."""
    try:
        answer = httpx.post(f"{url}/v1/join", json={"code": secret}, timeout=JOIN_TIMEOUT_SECONDS)
    except httpx.HTTPError as exc:
        raise CliError(
            f"the broker at {shown(url)} was not reached ({type(exc).__name__}: {shown(exc)}); "
            "nothing was written. Is it running, and is that its address as this machine "
            "reaches it? (--url changes it)"
        ) from None
    try:
        data = answer.json()
    except ValueError:
        data = None
    if answer.status_code != 200 or not isinstance(data, dict):
        error = (data or {}).get("error", {}) if isinstance(data, dict) else {}
        code = error.get("code", "unexpected_answer")
        message = error.get("message", f"HTTP {answer.status_code} from {url}/v1/join")
        raise CliError(
            f"the code was refused ({answer.status_code} {shown(code)}): {shown(message)}; "
            "nothing was written"
        )
    return {key: str(data[key]) for key in ("lobby", "agent", "token")}


def run(args: argparse.Namespace) -> int:
    secret, url = split_code(args.code, args.url)
    directory = Path(args.dir).expanduser().resolve()
    if not directory.is_dir():
        raise CliError(f"--dir {directory} is not a directory")
    # The file is prepared (0600) before the code is spent, so a token is never lost to an
    # unwritable directory; without --config its name is known only after the answer.
    target = Path(args.config) if args.config else config_dir() / "pending.json"
    target.expanduser().resolve().parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    config_file = ConfigFile(str(target), replace=True)
    try:
        answer = redeem(secret, url)
        if not args.config:
            config_file.path = config_dir().resolve() / f"{answer['lobby']}-{answer['agent']}.json"
        config_file.write(answer, url)
    except BaseException:
        config_file.discard()
        raise
    print(
        f"joined {shown(answer['lobby'])} as {shown(answer['agent'])}; its configuration is in "
        f"{config_file.path} (mode 0600)"
    )
    if args.host == "shell":
        print(
            "\nA shell agent uses `pocolobby msg` with it:\n\n"
            f"  export POCOLOBBY_CONFIG={config_file.path}\n"
            "  pocolobby msg context    # then: pocolobby msg inbox, send, ack"
        )
        return 0
    try:
        print(connect(str(config_file.path), "pocolobby", directory, host=args.host))
    except ConnectError as exc:
        raise CliError(
            f"joined, but the host was not set up: {exc}; run `pocolobby connect --config "
            f"{config_file.path} --host {args.host}` once that is fixed"
        ) from None
    return 0
