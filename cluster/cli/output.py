"""What the commands print: untrusted text (ids, topics, errors) and JSON, made safe for
a terminal."""

from __future__ import annotations

import orjson


def shown(text: object) -> str:
    """Untrusted text (ids, topics, errors) made safe to print: every character a
    terminal would interpret rather than show (controls, bidi controls, other
    non-printables) is escaped the way repr() does, e.g. \\x9b or \\u202e."""
    text = str(text)
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def shown_json(value: object) -> str:
    """value as indented JSON with every non-printable character inside its strings
    written as a \\u escape: the same JSON, safe for a terminal."""
    text = orjson.dumps(value, option=orjson.OPT_INDENT_2, default=str).decode()
    return "".join(c if c.isprintable() or c == "\n" else _json_escape(c) for c in text)


def _json_escape(char: str) -> str:
    code = ord(char)
    if code < 0x10000:
        return f"\\u{code:04x}"
    code -= 0x10000  # a surrogate pair, as JSON writes characters beyond the BMP
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"
