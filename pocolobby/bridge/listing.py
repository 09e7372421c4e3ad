"""The broker's tool catalog as this bridge loads it, and the tool list the host is answered:
loaded with backoff, kept when a reload fails, announced to the host only when a list it was
answered changed. Also when the host counts as a session (`until_a_session`: the claim).
"""

from __future__ import annotations

import asyncio
import contextlib

import mcp_types as types

from pocolobby.bridge.catalog import Catalog, CatalogError, compare
from pocolobby.bridge.host import HostGone
from pocolobby.bridge.results import Stop
from pocolobby.bridge.state import BridgeState, log
from pocolobby.bridge.tools import OWN_NAMES, OWN_TOOLS

# How long tools/list waits for the first catalog before listing only the bridge's tools.
CATALOG_WAIT_SECONDS = 5.0
CATALOG_RETRY_DELAYS = (1.0, 2.0, 5.0, 15.0, 30.0)
# A host that is still there this long after its handshake (and its first tools/list) is a
# session, not a health check: only then is the agent's runtime claimed (docs/DECISIONS.md, "The
# bridge under a real host").
CLAIM_AFTER_SECONDS = 1.0
CONTEXT_FIRST_HINT = "If this session has not called get_context yet, call it first."


class Listing(BridgeState):
    """The catalog and the tool list, on top of the bridge's state."""

    def _catalog_note(self) -> tuple[str | None, Catalog | None]:
        """Once per new revision after bootstrap: what it adds, if the model has not seen it."""
        current, seen = self.catalog, self.seen_catalog
        if not self.bootstrap_complete or current is None:
            return None, None
        if seen is None:
            self.seen_catalog = current
            return None, None
        if seen.revision == current.revision:
            return None, None
        change = compare(seen, current)
        if not change:
            self.seen_catalog = current  # wording only: nothing the model needs
            return None, None
        return change.sentence(), current

    def request_catalog(self) -> None:
        """Ask for a fresh catalog: start the loader, or wake it from its backoff."""
        self._catalog_wanted = True
        self._wake_loader.set()
        if self._loader is None or self._loader.done():
            self._loader = asyncio.ensure_future(self._load_catalog())

    async def refresh_catalog(self) -> None:
        """Request a catalog and wait until the loader is done (loaded, or out of retries)."""
        self.request_catalog()
        assert self._loader is not None
        await asyncio.shield(self._loader)

    async def _load_catalog(self) -> None:
        """Load `GET /v1/tools` while wanted; back off on failure, keeping the last good one."""
        failures = 0
        while self._catalog_wanted and self.stop is None:
            self._catalog_wanted = False
            self._wake_loader.clear()
            outcome = await self.broker.catalog()
            error = None
            self.catalog_refused = None
            if outcome.status in (401, 403):
                self.catalog_refused = Stop(
                    outcome.code or f"http_{outcome.status}", outcome.status, outcome.message or ""
                )
            if outcome.ok:
                try:
                    catalog = Catalog.parse(outcome.data)
                except CatalogError as exc:
                    error = f"invalid catalog: {exc}"
                else:
                    await self._install(catalog)
                    failures = 0
            else:
                error = outcome.message or outcome.code or "no answer"
            self.catalog_attempted.set()
            if error is None:
                continue
            self.catalog_error = error
            # A refused token is the stream's to report (once); anything else is said here.
            (log.info if outcome.status in (401, 403) else log.warning)(
                "could not load the tool catalog (%s); keeping the last good one", error
            )
            if failures >= len(CATALOG_RETRY_DELAYS) or outcome.status in (401, 403):
                return  # the next connect or announcement asks again
            self._catalog_wanted = True
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake_loader.wait(), CATALOG_RETRY_DELAYS[failures])
            failures += 1

    async def _install(self, catalog: Catalog) -> None:
        previous = self.catalog
        self.catalog = catalog
        self.catalog_error = None
        if previous is not None and previous.revision == catalog.revision:
            return
        log.info(
            "tool catalog revision %s (%d operations)", catalog.revision, len(catalog.operations)
        )
        await self.announce_list_change()

    def _list_state(self) -> tuple[str | None, str | None]:
        return (
            self.catalog.revision if self.catalog else None,
            self.stop.code if self.stop else None,
        )

    async def announce_list_change(self) -> None:
        """`tools/list_changed` only when the host was answered a list that is now different.

        Never for the first catalog: a list the host has not been answered yet cannot be
        stale, and a notice racing the first answer made hosts list twice.
        """
        if self.listed_as is None or self.listed_as == self._list_state():
            return
        self.listed_as = None
        with contextlib.suppress(HostGone):
            await self.host.notify("notifications/tools/list_changed")

    async def wait_for_catalog(self) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.catalog_attempted.wait(), CATALOG_WAIT_SECONDS)

    async def until_a_session(self, grace: float = CLAIM_AFTER_SECONDS) -> None:
        """Return once the host looks like a session rather than a health check.

        `claude mcp list`/`get` send exactly what a session sends (initialize, initialized,
        tools/list) and quit within a few hundred milliseconds of the tool list; a session
        stays. So: a tool call, or the host still there `grace` after its handshake and after
        its first tool list was answered. A host that leaves first never claims the agent.
        """
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.tool_called.wait(), grace)
            if self.tool_called.is_set() or not self.listing:
                return
            # The tool list is still being answered (the catalog is slow): the host registers
            # its channel handler after it has the list, so wait for that, then the grace.
            while self.listing and not self.tool_called.is_set():
                await asyncio.sleep(0.05)

    def tools(self) -> list[types.Tool]:
        """The catalog's operations under their names, then the bridge's own tools.

        After a refusal every description starts with it, so a host's tool view and the model
        both see why this session sends nothing; get_context's carries the fix.
        """
        self.listed_as = self._list_state()
        listed: list[types.Tool] = []
        operations = self.catalog.operations if self.catalog else {}
        for name, operation in operations.items():
            if name in OWN_NAMES:
                continue
            listed.append(
                types.Tool(
                    name=name,
                    description=operation.description,
                    input_schema=operation.input_schema,
                )
            )
        for own in OWN_TOOLS:
            current = operations.get(own.name) if own.catalog_schema else None
            if current is None:
                description, schema = own.description, own.schema
            else:
                description = f"{current.description} {own.note}".strip()
                schema = current.input_schema
            listed.append(types.Tool(name=own.name, description=description, input_schema=schema))
        listed = [
            t.model_copy(update={"description": f"{t.description or ''} {CONTEXT_FIRST_HINT}"})
            if t.name not in ("get_context", "ready")
            else t
            for t in listed
        ]
        if self.stop is not None:
            listed = [self._refused(tool) for tool in listed]
        elif self.pane_problem is not None:
            said = (
                f"PUSHES ARE OFF: {self.pane_problem}. Nothing is typed into your pane; the "
                "broker keeps your messages pending: read them with get_messages."
            )
            listed = [
                t.model_copy(update={"description": f"{said}\n\n{t.description or ''}"})
                for t in listed
            ]
        return listed

    def _refused(self, tool: types.Tool) -> types.Tool:
        assert self.stop is not None
        stop = self.stop
        said = f"NOT CONNECTED: PocoLobby refused this session ({stop.status} {stop.code})"
        if tool.name == "get_context":
            said = f"{said}. {self.stopped_text()}"
        else:
            said = f"{said}; this tool sends nothing. get_context's description says how to fix it."
        return tool.model_copy(update={"description": f"{said}\n\n{tool.description or ''}"})
