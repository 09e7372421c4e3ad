"""What the broker and the bridge must spell alike: the event version, headers and frame types.

A leaf module: it imports nothing (no Django), so `pocolobby.bridge` imports it on an agent
machine, and `tests/bridge/test_wire.py` checks both sides use these very objects.
"""

from __future__ import annotations

# The stream protocol; the broker refuses a bridge stating any other with 4426.
EVENT_VERSION = 5

# Upgrade and request headers a bridge sends.
EVENT_VERSION_HEADER = "X-PocoLobby-Event-Version"
RUNTIME_HEADER = "X-PocoLobby-Runtime"
GENERATION_HEADER = "X-PocoLobby-Generation"

# Frame types on the stream: from the broker ...
WELCOME_FRAME = "welcome"
NOTICE_FRAME = "notice"
ERROR_FRAME = "error"
# ... from the bridge ...
RECEIVED_FRAME = "received"
HOST_WRITTEN_FRAME = "host_written"
# ... and both ways.
HEARTBEAT_FRAME = "heartbeat"
