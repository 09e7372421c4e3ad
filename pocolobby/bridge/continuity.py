"""What this process remembers of the session's work, so no notice is written twice and no
bootstrap is repeated to a session that answered it or is working: acknowledged messages,
echoed nonces, the generation `ready` was called for, and the session's tool calls.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from lobbies.wire.jsontext import JSONObject, JSONValue


@dataclass
class Continuity:
    """The session's continuity in this process."""

    acknowledged: set[int] = field(default_factory=set)
    echoed_nonces: set[str] = field(default_factory=set)
    ready_generation: int | None = None
    context_loaded: bool = False  # get_context answered in this process
    # The latest bootstrap offered to the host (nonce, channel params) and its repeats.
    bootstrap_offer: tuple[str, JSONObject] | None = None
    # Tool calls the host started, and those still running: signs the session is working.
    tool_calls_started: int = 0
    tool_calls_running: int = 0
    # Tool calls refused while this process waited for a hand over, and whether it was
    # admitted after some: that refused turn's calls may still arrive (notices.py).
    tool_calls_refused: int = 0
    admitted_mid_turn: bool = False
    # Bootstraps the session showed work on: no quick repeat of them (notices.py).
    quiet_nonces: set[str] = field(default_factory=set)
    started_at: float = field(default_factory=time.time)  # the hooks' clock (turns.py)

    def bootstrap_complete(self, generation: int | None) -> bool:
        return generation is not None and self.ready_generation == generation

    def waiting_nonce(self, generation: int | None) -> str | None:
        """The offered bootstrap's nonce while `ready` has not echoed it, else None."""
        offer = self.bootstrap_offer
        if offer is None or self.bootstrap_complete(generation) or offer[0] in self.echoed_nonces:
            return None
        return offer[0]

    def remember_acknowledged(self, ids: JSONValue) -> None:
        if isinstance(ids, list):
            self.acknowledged.update(i for i in ids if isinstance(i, int))
