"""The lineage wing (extension ``"lineage"``): a run resumed from a saved one (``--resume``) counts on from the step it
resumed from, read from the framework's own resume (the integration wing's view) or the loop's ``torch.load`` of a
checkpoint the parent listed, else assumed and said; its passport section holds the lineage, the training's counts
and the work the restart cost (docs/spec.md section 22). Thread safety: the ``torch.load`` wrapper runs on any thread
and only sets one attribute; ``view`` on any; the rest on the training thread."""

from __future__ import annotations

import contextlib
import functools
import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainmeter.core import host_patches
from trainmeter.core.context import RunContext
from trainmeter.core.extension import ExtensionBase
from trainmeter.core.lifecycle import probes_available
from trainmeter.core.patches import ORIGINAL_ATTR, Patches
from trainmeter.core.provenance import Derivation, Input
from trainmeter.core.text import markdown_text
from trainmeter.lineage.parent import ParentRecord, minus, read_parent
from trainmeter.lineage.view import PARENT_LOSS, LineageView, earlier_points, earlier_runs
from trainmeter.record.passport import relative_to_run
from trainmeter.record.safe_read import iso_time
from trainmeter.sizes import format_count, format_duration, format_percent


@dataclass(frozen=True, slots=True)
class Resumed:
    """The parent's own step this run resumed from, its provenance (``detected``, ``declared`` or ``assumed``) and
    why; ``framework`` and its own ``framework_step`` when a framework's resume said it."""

    step: int
    provenance: str
    source: str
    checkpoint: str | None = None
    framework: str | None = None
    framework_step: int | None = None


def _plus(*values: Any) -> Any:
    return None if any(v is None for v in values) else sum(values)


class Lineage(ExtensionBase):
    """One resumed run's lineage: in the wiring only when ``--resume`` is given."""

    name = "lineage"
    requires = ("compute",)  # this run's FLOPs spent, read at the passport

    def __init__(self, parent_folder: Path) -> None:
        self._folder = parent_folder
        self._m: RunContext | None = None
        self.parent: ParentRecord | None = None
        self.resumed = Resumed(0, "assumed", "the parent's record was not read")
        self._paths: dict[str, dict[str, Any]] = {}  # absolute path of each parent checkpoint -> its record
        self._parent_flops: dict[str, Any] = {}  # the parent's FLOPs spent, by convention
        self._patches = Patches()
        self.first_step_s: float | None = None  # session seconds at this run's first optimizer step
        self._panel: list[dict[str, Any]] = []  # the last "Training" panel (publisher thread)

    def start(self, context: RunContext) -> None:
        """Read the parent's record; watch ``torch.load`` for one of its checkpoints."""
        self._m = context
        parent = self.parent = read_parent(self._folder)
        if parent.checkpoints:
            last = parent.checkpoints[-1]
            self.resumed = Resumed(last["step"], "assumed", "the parent's last checkpoint: no checkpoint it listed "
                                   "was loaded during this run", last["path"])
        else:
            self.resumed = Resumed(parent.steps, "assumed", "the parent listed no checkpoint: the model in memory "
                                   "is taken to go on from the parent's last step")
        self._paths = {parent.checkpoint_path(c): c for c in parent.checkpoints}
        compute = parent.passport.get("compute")
        spent = compute.get("flops_spent") if isinstance(compute, dict) else None
        self._parent_flops = dict(spent) if isinstance(spent, dict) else {}
        at = self._before(self._current())["steps"]
        context.set_step_origin(at)  # this run's points at steps of the training
        runs = earlier_runs(parent.folder, [*(parent.lineage.get("runs") or [{"path": "."}]), {"resumed_from_step": at}])

        def draw_earlier() -> None:  # read off the training thread, into the run's decimated views: the live widget
            # draws the earlier runs' training loss up to the step resumed from under this run's (bounded like every
            # series; not in this run's record)
            for steps, values in earlier_points(runs):
                context.series_views.extend(PARENT_LOSS, "step", steps, [math.nan if v is None else v for v in values])

        context.worker.submit(self.name, draw_earlier)
        if not self._paths or not probes_available() or not host_patches.allow("lineage", context.warn_once):
            return
        import torch

        self._patches.wrap(torch.serialization, "load", self._make_load)
        wrapped = vars(torch.serialization).get("load")
        if getattr(wrapped, ORIGINAL_ATTR, None) is getattr(torch, "load", None):
            self._patches.set(torch, "load", wrapped)

    def stop(self) -> None:
        """Put ``torch.load`` back. Idempotent."""
        self._patches.restore_all()

    def _make_load(self, original: Any) -> Any:
        @functools.wraps(original)
        def load(f: Any, *args: Any, **kwargs: Any) -> Any:
            """A load of a file in (or the file of) a parent checkpoint record: the step resumed from."""
            with contextlib.suppress(Exception):  # never into the user's load (docs/spec.md section 18)
                if isinstance(f, (str, os.PathLike)) and (record := self._record_at(f)) is not None:
                    self.resumed = Resumed(record["step"], "detected", f"torch.load of the parent's checkpoint "
                                           f"({record.get('source')} record)", record["path"])
            return original(f, *args, **kwargs)

        return load

    def _record_at(self, f: Any) -> dict[str, Any] | None:
        """The parent's checkpoint record whose file is ``f`` or holds it (the last in step order), else ``None``."""
        path = os.path.abspath(os.fspath(f))
        return next((record for where, record in reversed(self._paths.items())
                     if path == where or path.startswith(where + os.sep)), None)

    def _current(self) -> Resumed:
        """The step resumed from: a framework's own resume (its path matched to a parent's checkpoint record, else its
        step as the training's), else :attr:`resumed` (docs/spec.md section 22). Any thread."""
        m, parent = self._m, self.parent
        fw = getattr(m.extension("frameworks"), "resumed", None) if m is not None else None
        if fw is None or parent is None:
            return self.resumed
        if (record := self._record_at(fw.path) if fw.path else None) is not None:
            return Resumed(record["step"], fw.provenance, f"{fw.source}; its path is the parent's checkpoint "
                           f"({record.get('source')} record)", record["path"], fw.framework, fw.step)
        k = None if fw.step is None else fw.step - ((parent.lineage.get("before") or {}).get("steps") or 0)
        if k is None or not 0 <= k <= parent.steps:
            return self.resumed
        return Resumed(k, fw.provenance, f"{fw.source}; {fw.framework}'s step is the training's step (no checkpoint "
                       "record of the parent at its path)", None, fw.framework, fw.step)

    def on_step(self) -> None:
        """This run's first optimizer step: the end of the restart time."""
        if (m := self._m) is not None and self.first_step_s is None:
            self.first_step_s = m.elapsed_s()
            m.set_step_origin(self._before(self._current())["steps"])  # a load before the first step moved it; later ones do not
            m.next_step_hook_at(sys.maxsize, self)

    def view(self) -> LineageView | None:
        """The training's counts at the resumed step (compute's progress and ETA read them); ``None`` until the
        parent was read (a fault: the run counts as its own)."""
        if self.parent is None:
            return None
        before = self._before(self._current())
        return LineageView(steps_before=before["steps"], tokens_before=before["tokens"])

    # -- the record ------------------------------------------------------------------------------------------
    def on_report(self, report: Any) -> dict[str, Any] | None:
        """Run-log ``interval["lineage"]``: the training's ``before``, ``training`` and ``runs`` so far, so that this run
        killed before its passport is resumed with them (docs/spec.md section 22)."""
        section = self.passport_section()
        return None if section is None else {key: section[key] for key in ("before", "training", "runs")}

    def _at_resume(self, parent: ParentRecord, r: Resumed) -> tuple[int | None, dict[str, Any]]:
        """The parent's own tokens and FLOPs by convention after the step resumed from (FLOPs: its FLOPs spent times
        the share of its tokens trained by then)."""
        tokens, total = parent.tokens_after.get(r.step), parent.passport.get("tokens")
        share = tokens / total if tokens is not None and total else (0.0 if tokens == 0 else None)
        return tokens, {conv: None if share is None or v is None else v * share
                        for conv, v in self._parent_flops.items()}

    def _before(self, r: Resumed) -> dict[str, Any]:
        """The training at the resumed step: the parent's ``before`` plus the parent's own counts at its step."""
        if (parent := self.parent) is None:
            return {"steps": 0, "tokens": None, "token_unit": None, "flops_spent": {}}
        base = parent.lineage.get("before") or {"steps": 0, "tokens": 0}
        base_flops = base.get("flops_spent") if "flops_spent" in base else {}
        tokens, flops = self._at_resume(parent, r)
        return {"steps": (base.get("steps") or 0) + r.step, "tokens": _plus(base.get("tokens"), tokens),
                "token_unit": parent.passport.get("token_unit"),
                "flops_spent": {conv: _plus(v, base_flops.get(conv, 0.0) if isinstance(base_flops, dict) else None)
                                for conv, v in flops.items()}}

    def passport_section(self) -> dict[str, Any] | None:
        """``passport.json["lineage"]`` (docs/spec.md section 22)."""
        m, parent = self._m, self.parent
        if m is None or parent is None:
            return None
        rel = relative_to_run(parent.folder, m.options.run_root)
        r = self._current()
        before = self._before(r)
        unit = m.token_unit
        same_unit = unit == before["token_unit"]
        spent = {name[12:-1]: d.value for name, d in getattr(m.extension("compute"), "derived", {}).items()
                 if name.startswith("flops_spent[")}
        tokens_at, flops_at = self._at_resume(parent, r)
        lost = {"steps": parent.steps - r.step, "tokens": minus(parent.tokens_after.get(parent.steps), tokens_at),
                "flops_spent": {conv: minus(v, flops_at.get(conv)) for conv, v in self._parent_flops.items()},
                "time_s": minus(parent.last_step_s, parent.step_s.get(r.step))}
        ended, started = iso_time(parent.ended_at), iso_time(m.started_at)
        gap_s = (started - ended).total_seconds() if ended and started else None  # the parent's end to our start
        restart_s = None if gap_s is None or self.first_step_s is None else max(0.0, gap_s + self.first_step_s)
        earlier = parent.lineage.get("training") if isinstance(parent.lineage.get("training"), dict) else {}
        # the training's time up to this run's end (docs/spec.md section 22, "The training's goodput"; None where an
        # input is unknown): the runs' session time and the gaps between them; useful: less lost work and restarts
        wall_s = _plus(earlier.get("wall_s") if parent.lineage else parent.passport.get("elapsed_s"),
                       None if gap_s is None else max(0.0, gap_s), m.elapsed_s())
        lost_s = _plus(earlier.get("lost_s") if parent.lineage else 0.0, lost["time_s"])
        restarts_s = _plus(earlier.get("restart_s", 0.0), restart_s)
        useful_s = None if None in (wall_s, lost_s, restarts_s) else max(0.0, wall_s - lost_s - restarts_s)
        training = {"steps": before["steps"] + m.steps, "token_unit": unit if same_unit else None,
                    "tokens": _plus(before["tokens"], m.tokens if unit is not None else None) if same_unit else None,
                    "flops_spent": {conv: _plus(v, spent.get(conv)) for conv, v in before["flops_spent"].items()},
                    "lost_steps": (earlier.get("lost_steps") or 0) + lost["steps"],
                    "lost_tokens": _plus(earlier.get("lost_tokens", 0), lost["tokens"]),
                    "restart_s": restarts_s, "wall_s": wall_s, "lost_s": lost_s, "useful_s": useful_s,
                    "goodput": useful_s / wall_s if useful_s is not None and wall_s else None}
        runs = [{**run, "path": Path(os.path.normpath(Path(rel) / run.get("path", "."))).as_posix()}
                for run in parent.lineage.get("runs") or [{"path": ".", "name": parent.passport.get("name"),
                                                           "resumed_from_step": None}]]
        runs[-1].update(status=parent.status, steps=parent.steps, lost_steps=lost["steps"])
        runs.append({"path": ".", "name": m.options.name, "resumed_from_step": before["steps"],
                     "status": m.status, "steps": m.steps, "lost_steps": None})
        section = {"parent": rel, "runs": runs,
                   "resumed_from": {"step": before["steps"], "parent_step": r.step, "provenance": r.provenance,
                                    "source": r.source if "summarised_from" not in parent.passport else
                                    f"{r.source}; the parent's record: {parent.read_from}", "checkpoint": r.checkpoint,
                                    "framework": r.framework, "framework_step": r.framework_step},
                   "before": before, "training": training, "lost_work": lost, "restart_s": restart_s}
        section["markdown"] = _markdown(section)
        return section

    def panels(self) -> list[dict[str, Any]]:
        """The "Training" panel of the lineage so far (publisher thread, read-only; docs/spec.md section 22)."""
        try:
            s = self.passport_section()
        except Exception:  # a count moved while we read: the last panel stays
            return self._panel
        if s is None:
            return []
        r, t = s["resumed_from"], s["training"]
        self._panel = [{"id": "lineage", "title": "Training (resumed runs)", "rows": [
            {"label": "Runs", "value": " → ".join(str(run.get("name")) for run in s["runs"]), "unit": ""},
            {"label": "Resumed from step", "value": r["step"], "unit": "count", "provenance": r["provenance"],
             "note": r["source"]},
            {"label": "Steps of the training", "value": t["steps"], "unit": "count", "provenance": "counted"},
            {"label": "Lost work (steps)", "value": t["lost_steps"], "unit": "count", "provenance": r["provenance"],
             "note": "steps trained twice: after the step each run resumed from"},
            {"label": "Lost work (time)", "value": t["lost_s"], "unit": "s", "provenance": "measured"},
            {"label": "Restart time", "value": t["restart_s"], "unit": "s", "provenance": "measured",
             "note": "from a run's end to the next one's first step"},
            {"label": "Goodput of the training", "value": t["goodput"], "unit": "fraction", "provenance": "measured",
             "note": "wall time not lost to a restart, across the lineage"}]}]
        return self._panel

    def derivations(self) -> list[Derivation]:
        """The training's steps, lost steps and goodput (docs/spec.md section 22, "The training's goodput")."""
        if (section := self.passport_section()) is None:
            return []
        r, t, parent_steps = section["resumed_from"], section["training"], section["runs"][-2]["steps"]  # the parent's
        resumed = Input(name="resumed_step", value=r["step"], unit="1", provenance=r["provenance"], source=r["source"])
        seconds = [Input(name=name, value=t.get(name), unit="s", provenance="measured", source=source)
                   for name, source in (("wall_s", "each run's session clock plus the gaps between a run's end and the "
                                                   "next one's start (started_at, ended_at)"),
                                        ("lost_s", "each parent's session seconds after the step resumed from (its "
                                                   "step series' time at that step to its end)"),
                                        ("restart_s", "each gap plus the next run's session seconds to its first "
                                                      "step"))]
        return [
            Derivation(name="training_steps", formula="resumed_step + steps", unit="1", value=t["steps"],
                       inputs=(resumed, Input(name="steps", value=section["runs"][-1]["steps"], unit="1",
                                              provenance="counted", source="this run's optimizer steps"))),
            Derivation(name="lost_steps", formula="parent_steps - parent_resumed_step", unit="1",
                       value=section["lost_work"]["steps"],
                       inputs=(Input(name="parent_steps", value=parent_steps, unit="1", provenance="counted",
                                     source="the parent's passport"),
                               Input(name="parent_resumed_step", value=r["parent_step"], unit="1",
                                     provenance=r["provenance"], source=r["source"]))),
            Derivation(name="training_goodput", formula="(wall_s - lost_s - restart_s) / wall_s", unit="1",
                       value=t.get("goodput"), inputs=tuple(seconds)),
        ]


def _markdown(s: dict[str, Any]) -> str:
    """passport.md's lineage lines."""
    r, t, lost = s["resumed_from"], s["training"], s["lost_work"]
    chain = " → ".join(markdown_text(run.get("name")) for run in s["runs"])
    unit = t.get("token_unit") or "samples/tokens"
    return "\n".join([
        f"- Lineage: {chain} (parent {markdown_text(s['parent'])})",
        f"- Resumed from step {format_count(r['step'])} ({r['provenance']}: {markdown_text(r['source'])})",
        f"- Training: {format_count(t['steps'])} steps, {unit} {format_count(t['tokens'])}; lost work "
        f"{format_count(lost['steps'])} steps, {unit} {format_count(lost['tokens'])}; restart time "
        f"{format_duration(s['restart_s'])}",
        f"- Goodput of the training: {format_percent(t.get('goodput'))} (useful {format_duration(t.get('useful_s'))} "
        f"of {format_duration(t.get('wall_s'))} wall; lost work {format_duration(t.get('lost_s'))}, restart "
        f"{format_duration(t.get('restart_s'))})"])
