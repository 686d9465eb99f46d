"""User text made safe for the text sinks: terminal lines, Markdown, tables (docs/spec.md section 18)."""

from __future__ import annotations

import re

_FORMAT = ("\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u180e\u200b-\u200f\u202a-\u202e"
           "\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb\U000110bd\U000110cd\U00013430-\U0001343f"
           "\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f")
"""Every Unicode category Cf character (Unicode 15; tests/core/test_text.py checks against unicodedata)."""
_CONTROL = re.compile(f"[\\x00-\\x1f\\x7f-\\x9f\\u2028\\u2029{_FORMAT}]")
_MARKDOWN = re.compile(r"([\\`*_\[\]|~])")


def printable(text: object) -> str:
    """``text`` with control and format characters shown as escapes (``\\n``, ``\\x1b``, ``\\u202e``), on one line."""
    s = str(text)
    return _CONTROL.sub(lambda m: m.group(0).encode("unicode_escape").decode("ascii"), s) if _CONTROL.search(s) else s


def markdown_text(text: object) -> str:
    """``text`` as literal Markdown inline text: one line, HTML and Markdown syntax escaped."""
    s = printable(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _MARKDOWN.sub(r"\\\1", s)
