"""Item 9: free text in passport.md (exception messages, --peak-source, names) stays text."""

from __future__ import annotations

import pytest

from trainmeter.api import run_monitored
from trainmeter.core.clock import FakeClock
from trainmeter.extensions import default_extensions, make_monitor
from trainmeter.options import make_options

PAYLOAD = "</script><script>alert(1)</script>\n# forged heading [x](javascript:alert(1))"


def _html(markdown: str) -> str:
    markdown_it = pytest.importorskip("markdown_it")
    return markdown_it.MarkdownIt("commonmark").render(markdown)


def test_an_exception_message_and_a_peak_source_never_become_markup(run_root):
    options = make_options(run_dir=run_root, name="xss", peak_tflops=989, peak_source=PAYLOAD, widget=False,
                           tap=False)
    m = make_monitor(options, clock=FakeClock(), text=False, probes=False, extensions=default_extensions(options))
    with pytest.raises(RuntimeError):
        with run_monitored(m):
            m.on_step(10)
            raise RuntimeError(PAYLOAD)
    md = (m.run_dir / "passport.md").read_text()
    assert "<script>" not in md and "\n# forged" not in md
    html = _html(md)
    assert "<script>" not in html and 'href="javascript' not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html  # still readable, as text
