"""User text in text sinks: control characters escaped, Markdown and HTML inert."""

from trainmeter.core.text import markdown_text, printable


def test_printable_escapes_control_characters_and_keeps_the_rest():
    assert printable("loss") == "loss"
    assert printable("a\nb\r\t\x1b[2J\x7f\u2028é") == "a\\nb\\r\\t\\x1b[2J\\x7f\\u2028é"
    assert printable(3) == "3"


def test_markdown_text_is_one_line_of_inert_text():
    out = markdown_text("</script><script>alert(1)</script>\n# h [x](javascript:1) *b* `c` a|b")
    assert "<" not in out and ">" not in out and "\n" not in out
    assert "\\[x\\]" in out and "\\*b\\*" in out and "\\`c\\`" in out and "a\\|b" in out
    assert markdown_text("3.11.7") == "3.11.7"
