"""JSON as Python holds it once parsed, for code that reads free JSON (a checkpoint, a request
body, a host's status line data) and narrows it with isinstance rather than trusting it.

No Django here: the CLI and the agents' reports read JSON too.
"""

from __future__ import annotations

from typing import TypeAlias

JSONValue: TypeAlias = str | int | float | bool | list["JSONValue"] | dict[str, "JSONValue"] | None
JSONObject: TypeAlias = dict[str, JSONValue]
