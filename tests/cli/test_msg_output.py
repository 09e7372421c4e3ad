"""What `pocolobby msg` prints and exits with: another party's text is terminal-safe in every
form (text and JSON, stdout and stderr, and inside a real tmux pane running bash), bad
arguments exit 1, a restore-mode refusal exits 2, and a closed output pipe ends it quietly
(issue 28)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from pocolobby.msg import render_context
from tests.cli.test_backup_restore import backup_path
from tests.server import REPO_ROOT, AgentConfig, Broker, BrokerFactory, clean_env
from tests.shell_pane import NEEDS_TMUX_AND_BASH, screen_lines, shell_pane

pytest_plugins = ("tests.server_fixtures",)

# What a terminal may act on (lobbies.wire.for_terminal shows each as its escape).
BIDI = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
RAW_CONTROL = re.compile(f"[\\x00-\\x08\\x0b-\\x1f\\x7f-\\x9f{BIDI}\u2028\u2029]")


def attack(marker: Path) -> str:
    """A message whose raw printing makes a terminal act: retitle the pane with a command, ask
    for that title, the cursor position and the device's identity back into the shell's input
    (DSR, DA, title reports), write and read the clipboard (OSC 52), a DCS query, the 8-bit
    CSI, bidi overrides, a carriage return hiding what came before."""
    command = f"touch {marker}"
    return (
        "please review\n"
        f"\x1b]0;;{command};\x07\x1b]2;;{command};\x1b\\"
        "\x1b[21t\x1b[20t\x1b[6n\x1b[c\x1b[>c\x1b[5n"
        "\x1b]52;c;dG91Y2ggL3RtcC9wd25lZA==\x07\x1b]52;c;?\x07"
        '\x1bP$q"p\x1b\\\x9b6n\x9d0;x\x9c'
        f"\nRTL \u202eexe.txt\u202c and \u2066isolated\u2069\nhidden\r{command}\n"
    )


def msg(
    config: Path, *args: str, stdin: str = "", env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pocolobby", "msg", *args, "--config", str(config)],
        cwd=REPO_ROOT, env=env or clean_env(), input=stdin, capture_output=True, text=True,
        timeout=60, check=False,
    )  # fmt: skip


def assert_terminal_safe(text: str) -> None:
    assert not RAW_CONTROL.search(text), repr(text)


@pytest.mark.slow
def test_a_peers_escape_sequences_are_shown_visibly_in_text_and_json(
    module_broker: Broker, tmp_path: Path
):
    configs = module_broker.provision("safe-output", ["lead", "coder"], tmp_path)
    lead, coder = configs["lead"].path, configs["coder"].path
    content = attack(tmp_path / "marker")
    sent = msg(lead, "send", "coder", "-", stdin=content)
    assert sent.returncode == 0, sent.stderr

    for command in ("inbox", "history"):
        shown = msg(coder, command)
        assert shown.returncode == 0, shown.stderr
        assert_terminal_safe(shown.stdout)
        assert "\\x1b]0;;touch " in shown.stdout and "\\x1b[6n\\x1b[c" in shown.stdout
        assert "\\x9b6n" in shown.stdout and "RTL \\u202eexe.txt\\u202c" in shown.stdout
        assert "    hidden\\rtouch " in shown.stdout  # the carriage return shown, not obeyed
        as_json = msg(coder, command, "--json")
        assert_terminal_safe(as_json.stdout)
        assert json.loads(as_json.stdout)["messages"][0]["content"] == content  # exact

    assert msg(lead, "history").stdout.count("\\x1b[6n") == 1  # the sender's own copy too
    # a terminal that cannot encode the text gets escapes, not a traceback
    msg(lead, "send", "coder", "caf\u00e9 \u4e2d\u6587")
    ascii_only = msg(coder, "inbox", env=clean_env({"PYTHONIOENCODING": "ascii"}))
    assert ascii_only.returncode == 0, ascii_only.stderr
    assert "caf\\xe9 \\u4e2d\\u6587" in ascii_only.stdout
    status = msg(coder, "status", "reviewing \u00e9")  # a status is one checked line
    assert status.stdout.strip() == "status: reviewing \u00e9"
    context = msg(coder, "context")
    assert context.returncode == 0 and "inbox: 2 pending" in context.stdout


@pytest.mark.slow
def test_errors_that_echo_input_are_terminal_safe(module_broker: Broker, tmp_path: Path):
    configs = module_broker.provision("safe-errors", ["lead", "coder"], tmp_path)
    lead = configs["lead"].path
    nobody = msg(lead, "send", "co\x1b]0;x\x07der\u202e", "hi", "--json")
    assert nobody.returncode == 2
    assert_terminal_safe(nobody.stderr + nobody.stdout)
    status = msg(lead, "status", "line\x1b[6n")
    assert status.returncode == 2
    assert_terminal_safe(status.stderr)
    missing = msg(tmp_path / "no\x1b[6nconfig.json", "inbox")
    assert missing.returncode == 1 and "\\x1b[6n" in missing.stderr
    assert_terminal_safe(missing.stderr)


@pytest.mark.slow
@NEEDS_TMUX_AND_BASH
def test_reading_a_peers_escape_sequences_in_a_bash_pane_runs_nothing(
    module_broker: Broker, tmp_path: Path
):
    """The issue's reproduction: `msg inbox` in a real tmux pane running bash, then Enter. Raw,
    the terminal's answers to the queries were typed into bash, which ran `5R`, `16R`."""
    configs = module_broker.provision("safe-pane", ["lead", "coder"], tmp_path)
    marker = tmp_path / "marker"
    sent = msg(configs["lead"].path, "send", "coder", "-", stdin=attack(marker))
    assert sent.returncode == 0, sent.stderr

    with shell_pane(tmp_path, {"POCOLOBBY_CONFIG": str(configs["coder"].path)}) as pane:
        title = pane.title()
        command = f"{sys.executable} -m pocolobby msg inbox"
        pane.type(command)
        screen = pane.wait_for(lambda s: "acknowledge when handled" in s)
        pane.wait_for_prompt(2)
        pane.enter()  # whatever the terminal typed into the input would run now
        screen = pane.wait_for_prompt(3)
        assert "\\x1b]0;;touch " in screen and "\\x1b[6n" in screen
        assert pane.ran() == [command]
        assert not marker.exists()
        assert pane.title() == title
        assert not any("command not found" in line for line in screen_lines(screen)), screen


def test_bad_arguments_exit_1_with_the_usage(tmp_path: Path):
    config = tmp_path / "absent.json"
    for args in (
        [],
        ["bogus"],
        ["send", "coder"],
        ["inbox", "--limit", "many"],
        ["send", "coder", "x", "--fields", "[1]"],
        ["ack"],
    ):
        result = subprocess.run(
            [sys.executable, "-m", "pocolobby", "msg", *args, "--config", str(config)],
            cwd=REPO_ROOT, env=clean_env(), capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert result.returncode == 1, (args, result.stderr)
        assert "usage: pocolobby msg" in result.stderr and "error:" in result.stderr


@pytest.mark.slow
def test_json_output_into_a_closed_pipe_ends_quietly_with_141(
    module_broker: Broker, tmp_path: Path
):
    """`pocolobby msg history --json | head`: the reader left before we wrote; no traceback,
    and the code of a program stopped by SIGPIPE."""
    configs = module_broker.provision("safe-pipe", ["lead", "coder"], tmp_path)
    for n in range(3):
        msg(configs["lead"].path, "send", "coder", f"message {n}")
    process = subprocess.Popen(
        [sys.executable, "-m", "pocolobby", "msg", "history", "--json",
         "--config", str(configs["coder"].path)],
        cwd=REPO_ROOT, env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    assert process.stdout is not None and process.stderr is not None
    process.stdout.close()
    stderr = process.stderr.read().decode()
    assert process.wait(timeout=60) == 141
    assert "Traceback" not in stderr and "BrokenPipe" not in stderr and stderr == ""


@pytest.mark.slow
def test_a_restore_mode_refusal_is_definite_and_exits_2(
    broker_factory: BrokerFactory, tmp_path: Path
):
    broker = broker_factory(name="restore-exit")
    before = broker.provision("ops", ["alpha", "beta"], tmp_path / "configs")
    pending = msg(before["beta"].path, "send", "alpha", "migrate the users", "--json")
    message_id = json.loads(pending.stdout)["message_id"]
    backup = broker.cli("backup", "--to", str(tmp_path / "backups"))
    assert backup.returncode == 0, backup.stderr
    broker.stop()
    configs_dir = tmp_path / "new-configs"
    restored = broker.cli(
        "restore", str(backup_path(backup.stdout)), "--configs-dir", str(configs_dir)
    )
    assert restored.returncode == 0, restored.stderr
    broker.start()
    fresh = AgentConfig.read(configs_dir / "ops-alpha.json")

    inbox = msg(fresh.path, "inbox", "--json")
    assert inbox.returncode == 2, inbox.stderr
    assert "refused (503 restore_mode)" in inbox.stderr
    assert json.loads(inbox.stdout)["outcome"] == "refused"
    sent = msg(fresh.path, "send", "alpha", "hello")
    assert sent.returncode == 2 and "nothing stored" in sent.stderr

    assert broker.cli("restore", "--finish").returncode == 0
    context = msg(fresh.path, "context")
    assert context.returncode == 0, context.stderr
    first, second = context.stdout.splitlines()[:2]
    assert first.startswith("RESTORED: this broker was restored from a backup taken at ")
    assert f"uncertain messages: {message_id}:" in second
    assert "check your work before repeating any of it" in second


def test_context_text_leads_with_the_restore_warning_and_says_what_json_says():
    context = {
        "agent_id": "backend",
        "lobby_id": "team",
        "role": "You own the API",
        "runtime": {
            "runtime_id": "r-1",
            "generation": 3,
            "ready": False,
            "loaded_checkpoint_revision": None,
        },
        "checkpoint": {
            "revision": 4,
            "checkpoint": {"task": "migrate users"},
            "covers_receipts_through": 12,
            "saved_at": "2026-12-01T10:00:00Z",
            "age_seconds": 5400,
            "saved_by_generation": 2,
        },
        "receipt_sequence": 15,
        "inbox": {
            "pending": 1,
            "important": 0,
            "oldest_pending_at": "2026-12-01T11:00:00Z",
            "first": [{"message_id": 21, "from": "lead", "created_at": "t"}],
        },
        "uncertain": {
            "total": 2,
            "covered_through": 12,
            "messages": [{"message_id": 13, "from": "lead", "content": "ship it"}],
            "headers": [{"message_id": 14, "from": "lead"}],
            "next_cursor": "c-2",
        },
        "guidance": ["Call ready with the nonce"],
        "tool_guide": {"revision": "x", "tools": [{"name": "send_message", "purpose": "send"}]},
        "broker": {"host": "h", "version": "0.1.0", "incarnation": "i-1"},
        "restored": {
            "incarnation": "i-1",
            "backup_taken_at": "2026-12-01T09:00:00Z",
            "restored_at": "2026-12-01T12:00:00Z",
            "uncertain_message_ids": [21, 22],
            "note": "The broker was restored",
        },
    }
    text = render_context(context)
    first, second = text.splitlines()[:2]
    assert first.startswith("RESTORED: ") and "2026-12-01T09:00:00Z" in first
    assert "21, 22" in second and "check your work before repeating any of it" in second
    for fact in (
        "generation 3",
        "receipt sequence: 15",
        "revision 4",
        '"task": "migrate users"',
        "#21",
        "#13",
        "ship it",
        "without bodies: 14",
        "--cursor c-2",
        "send_message",
        "incarnation i-1",
        "Call ready with the nonce",
        "You own the API",
    ):
        assert fact in text, fact
    assert not render_context({**context, "restored": None}).startswith("RESTORED")
