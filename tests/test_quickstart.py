"""The quickstart notebook, executed headless by nbclient with a few steps: it runs, stays small and carries
the static HTML snapshot of the dashboard (for a saved notebook read without a kernel)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
QUICKSTART = REPO / "notebooks" / "quickstart.ipynb"
ARTIFACTS = REPO / "test-artifacts"
MAX_BYTES = 300_000
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"

pytestmark = pytest.mark.slow


def _execute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, steps: int) -> tuple[dict, int]:
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("torch")
    monkeypatch.setenv("QUICKSTART_STEPS", str(steps))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    nb = nbformat.read(str(QUICKSTART), as_version=4)
    client = nbclient.NotebookClient(nb, timeout=240, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    out = tmp_path / "quickstart-executed.ipynb"
    nbformat.write(nb, str(out))
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / "quickstart-executed.ipynb").write_bytes(out.read_bytes())
    return json.loads(out.read_text()), out.stat().st_size


def test_executed_quickstart_is_small_and_holds_the_html_snapshot(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    nb, size_bytes = _execute(tmp_path, monkeypatch, steps=500)
    assert size_bytes < MAX_BYTES, f"executed quickstart is {size_bytes} bytes"
    # at the cell's end the widget view becomes the static dashboard (no "model not found" on reopen: docs/protocol.md)
    dashboards = [o for c in nb["cells"] for o in c.get("outputs", [])
                  if "trainmeter-snapshot" in "".join(o.get("data", {}).get("text/html") or [])]
    assert len(dashboards) == 1 and WIDGET_VIEW not in dashboards[0]["data"]
    html = dashboards[0]["data"].get("text/html")
    html = "".join(html) if isinstance(html, list) else html
    assert "data:image/svg+xml;base64," in html and "<script" not in html.lower()
    assert "completed" in html
    assert "text/plain" in dashboards[0]["data"]
    state = nb["metadata"].get("widgets", {}).get("application/vnd.jupyter.widget-state+json", {})
    assert state.get("state"), "nbclient saves the widget state in the notebook metadata"
    runs = sorted((tmp_path / ".trainmeter" / "runs").glob("*-quickstart"))
    assert runs and (runs[-1] / "passport.json").is_file()
