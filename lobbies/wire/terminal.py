"""Text another party wrote, made safe to show in a terminal (the bridge's panes and the CLI)."""

from __future__ import annotations

import json
import re
from typing import Any

# Text another party wrote, shown in a terminal (issue 28). A peer's message, an agent's
# status, a broker's error echoing input: printed raw, an escape sequence in it would act
# (set the title, make the terminal answer a query into the shell's input, write the
# clipboard), and a bidi override would reorder what follows it. So every C0 and C1 control,
# DEL, bidi control, line or paragraph separator and lone surrogate is shown as its escape
# (`\x1b`, `\u202e`); only `\n` and `\t` stay, and only in multi-line text.
BIDI_CONTROLS = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
_SHOWN_ESCAPED = re.compile(f"[\\x00-\\x1f\\x7f-\\x9f{BIDI_CONTROLS}\u2028\u2029\\ud800-\\udfff]")
_SHOWN_ESCAPED_MULTILINE = re.compile(
    f"[\\x00-\\x08\\x0b-\\x1f\\x7f-\\x9f{BIDI_CONTROLS}\u2028\u2029\\ud800-\\udfff]"
)
# The characters json.dumps(ensure_ascii=False) leaves raw (it escapes those below 0x20).
_JSON_RAW_UNSAFE = re.compile(f"[\\x7f-\\x9f{BIDI_CONTROLS}\u2028\u2029\\ud800-\\udfff]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _visible(match: re.Match[str]) -> str:
    char = match.group()
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def for_terminal(text: object, *, multiline: bool = False) -> str:
    """`text` safe to print: controls shown as escapes, never interpreted. A one-line field
    (a name, a status, an error) shows `\\n` and `\\t` too; multi-line content keeps its
    line breaks and tabs (a `\\r\\n` is one break)."""
    value = text if isinstance(text, str) else str(text)
    if multiline:
        return _SHOWN_ESCAPED_MULTILINE.sub(_visible, value.replace("\r\n", "\n"))
    return _SHOWN_ESCAPED.sub(_visible, value)


def json_for_terminal(value: Any, indent: int | None = 2) -> str:
    """JSON that decodes to exactly `value` and is safe to print: non-ASCII text stays
    readable, and what json.dumps leaves raw among the controls above becomes `\\uXXXX`."""
    text = json.dumps(value, ensure_ascii=False, indent=indent)
    return _JSON_RAW_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
