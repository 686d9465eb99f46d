"""User text made safe for the text sinks: terminal lines, Markdown, tables.

Names and messages come from the user (series names, run names, exception
messages, ``--peak-source``). Every text sink passes them through here, so a
``\\n`` cannot forge a line, an escape sequence never reaches the terminal and
``<script>`` in a passport.md stays text when the Markdown becomes HTML.
"""

from __future__ import annotations

import re

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_MARKDOWN = re.compile(r"([\\`*_\[\]|~])")


def _escape_control(match: re.Match[str]) -> str:
    ch = match.group(0)
    named = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}.get(ch)
    if named is not None:
        return named
    return f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else f"\\u{ord(ch):04x}"


def printable(text: object) -> str:
    """``text`` with control characters shown as escapes (``\\n``, ``\\x1b``), on one line."""
    s = str(text)
    return _CONTROL.sub(_escape_control, s) if _CONTROL.search(s) else s


def markdown_text(text: object) -> str:
    """``text`` as literal Markdown inline text: one line, HTML and Markdown syntax escaped."""
    s = printable(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _MARKDOWN.sub(r"\\\1", s)
