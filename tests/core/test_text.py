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


def test_every_format_character_is_escaped_bidi_controls_included():
    import sys
    import unicodedata

    cf = [chr(c) for c in range(sys.maxunicode + 1) if unicodedata.category(chr(c)) == "Cf"]
    assert cf and all("\\u" in printable(ch) or "\\U" in printable(ch) or "\\x" in printable(ch) for ch in cf)
    assert printable("loss\u202e\u2066x\u2069") == "loss\\u202e\\u2066x\\u2069"
    assert printable("tag\U000e0041") == "tag\\U000e0041"
    assert printable("naïve ü 损失 🙂") == "naïve ü 损失 🙂"  # other letters and symbols stay as they are


def test_a_bidi_name_reaches_the_text_line_escaped(run_root):
    import io

    import trainmeter.api as tm
    from trainmeter.core.clock import FakeClock
    from trainmeter.extensions import make_monitor
    from trainmeter.options import make_options

    clock, out = FakeClock(100.0), io.StringIO()
    m = make_monitor(make_options(run_dir=run_root, interval_s=1.0), clock=clock, text=True, probes=False,
                     extensions=[], out=out).start()
    tm.emit(**{"acc\u202e=1 ssol": 1.0})
    clock.advance(1.0)
    m.on_step(1)
    m.finish("completed")
    assert "\u202e" not in out.getvalue() and "acc\\u202e=1 ssol" in out.getvalue()
    assert "\u202e" not in (m.run_dir / "passport.md").read_text(encoding="utf-8")
