"""Another party's text shown in a terminal: `lobbies.wire.for_terminal` and
`json_for_terminal` show every control visibly and never pass one through (issue 28)."""

from __future__ import annotations

import json
import re

from hypothesis import given
from hypothesis import strategies as st

from lobbies.wire.terminal import for_terminal, json_for_terminal

# What a terminal may act on: C0 and C1 controls, DEL, the bidi controls, line and paragraph
# separators; and lone surrogates, which cannot even be encoded for printing.
BIDI = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
OTHERS = f"\\x7f-\\x9f{BIDI}\u2028\u2029\\ud800-\\udfff"
UNSAFE = re.compile(f"[\\x00-\\x1f{OTHERS}]")
UNSAFE_IN_LINES = re.compile(f"[\\x00-\\x08\\x0b-\\x1f{OTHERS}]")
# Every code point, surrogates and controls included, weighted towards the dangerous ones.
ANY_TEXT = st.text(
    st.one_of(
        st.characters(min_codepoint=0, max_codepoint=0x10FFFF, exclude_categories=()),
        st.sampled_from([*"\x1b\x07\x9b\x9d\x90\x9c\x7f\r\n\t\u2028\u2029", *BIDI]),
    )
)

ATTACKS = [
    "\x1b]0;pwned title\x07",  # OSC 0: set the window title
    "\x1b]52;c;cm0gLXJmIH4=\x07",  # OSC 52: write the clipboard
    "\x1b[6n",  # CSI DSR: the terminal types its cursor position into the shell's input
    "\x1b[c",  # DA: the terminal types its identity into the input
    "\x1bP1$r\x1b\\",  # DCS, ended by ST
    "\x9b6n",  # the same query with the 8-bit CSI
    "\x9d0;t\x9c",  # 8-bit OSC and ST
    "a\x7fb\x08c",  # DEL and backspace hide what came before
    "safe\rlooks different",  # a carriage return overwrites the line
]


def test_escape_sequences_are_shown_as_their_escapes_never_passed_through() -> None:
    assert for_terminal("\x1b]0;pwned title\x07") == "\\x1b]0;pwned title\\x07"
    assert for_terminal("\x1b[6n and \x9b6n") == "\\x1b[6n and \\x9b6n"
    assert for_terminal("\x1bP1$r\x1b\\") == "\\x1bP1$r\\x1b\\"
    assert for_terminal("a\x7fb\x00c") == "a\\x7fb\\x00c"
    for attack in ATTACKS:
        assert not UNSAFE.search(for_terminal(attack)), attack
        assert not UNSAFE_IN_LINES.search(for_terminal(attack, multiline=True)), attack


def test_bidi_controls_are_shown_visibly_so_they_reorder_nothing() -> None:
    assert for_terminal("invoice\u202egpj.exe") == "invoice\\u202egpj.exe"
    assert for_terminal("\u2066x\u2069 \u200f \u061c") == "\\u2066x\\u2069 \\u200f \\u061c"
    # the joiners an emoji needs are not controls and stay
    assert for_terminal("\U0001f469\u200d\U0001f4bb é 中文") == "\U0001f469\u200d\U0001f4bb é 中文"


def test_a_one_line_field_shows_its_line_breaks_and_multi_line_content_keeps_them() -> None:
    assert for_terminal("lead\n#2 forged header") == "lead\\n#2 forged header"
    assert for_terminal("a\tb\rc") == "a\\tb\\rc"
    assert for_terminal("one\r\ntwo\n\tthree\rfour", multiline=True) == ("one\ntwo\n\tthree\\rfour")
    assert for_terminal("x\u2028y\x0bz\x0c", multiline=True) == "x\\u2028y\\x0bz\\x0c"


def test_lone_surrogates_are_shown_so_printing_them_cannot_fail() -> None:
    assert for_terminal("a\ud800b") == "a\\ud800b"
    for_terminal("\udfff", multiline=True).encode("utf-8")


def test_values_that_are_not_text_are_shown_as_their_text() -> None:
    assert for_terminal(42) == "42"
    assert for_terminal(None) == "None"


@given(ANY_TEXT)
def test_no_text_passes_a_control_through(text: str) -> None:
    one_line = for_terminal(text)
    assert not UNSAFE.search(one_line)
    lines = for_terminal(text, multiline=True)
    assert not UNSAFE_IN_LINES.search(lines)
    one_line.encode("utf-8")  # printable: nothing a strict encoder refuses
    lines.encode("utf-8")


@given(ANY_TEXT)
def test_shown_text_is_shown_again_unchanged_and_safe_text_is_left_as_it_is(text: str) -> None:
    once = for_terminal(text)
    assert for_terminal(once) == once
    assert for_terminal(once, multiline=True) == once
    if not UNSAFE.search(text):
        assert once == text


ANY_KEY = "from \x1b[31m\u202e\x85"


@given(st.recursive(ANY_TEXT | st.integers() | st.none(), lambda inner: st.lists(inner)))
def test_json_for_a_terminal_decodes_to_exactly_the_value_and_carries_no_raw_control(
    value: object,
) -> None:
    text = json_for_terminal({"content": value, ANY_KEY: value})
    assert not UNSAFE_IN_LINES.search(text)  # indent=2 puts line breaks between items only
    assert json.loads(text) == {"content": value, ANY_KEY: value}
    text.encode("utf-8")


def test_json_for_a_terminal_keeps_other_text_readable() -> None:
    assert json_for_terminal({"a": "é 中文 \x1b \u202e \x85"}, indent=None) == (
        '{"a": "é 中文 \\u001b \\u202e \\u0085"}'
    )
