"""What the operator commands print of text others wrote is terminal-safe (issue 28): an
error that echoes a name, a lobby's agents and attachments."""

from __future__ import annotations

import pytest

from tests.cli.test_msg_output import assert_terminal_safe
from tests.server import Broker

pytest_plugins = ("tests.server_fixtures",)
pytestmark = pytest.mark.slow


def test_errors_that_echo_a_name_show_its_controls_visibly(module_broker: Broker):
    for args in (
        ["lobby", "create", "te\x1b[6nam\u202e"],
        ["agent", "list", "no\x1b]0;x\x07pe"],
        ["agent", "add", "nope\x9b6n", "x", "--config", "/nonexistent/x.json"],
        ["status", "x\x1b[c"],
        ["attachments", "n\x1b[6n"],
        # the command's own errors echo what it was given
        ["agent", "add", "team", "x", "--config", "/nonexistent\x1b[6n/x.json"],
        ["agent", "set-role", "team", "x", "--role-file", "/no\x1b]0;t\x07role\u202e"],
    ):
        result = module_broker.cli(*args)
        assert result.returncode == 1, (args, result.stdout, result.stderr)
        assert_terminal_safe(result.stdout + result.stderr)
