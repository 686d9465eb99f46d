"""The PyTorch Ignite adapter: the trainer's ``Engine.run`` gets trainmeter's handler (a stop through
``engine.terminate()``); an engine run inside it (an evaluator's) is an eval span and its ``state.metrics`` series
(docs/spec.md sections 9 and 11). Steps are the torch optimizer's, the loss what the process function passes to
backward; ``Checkpoint``/``ModelCheckpoint`` and ``DiskSaver`` are savers of the time split. Training thread.
"""

from __future__ import annotations

import functools
from typing import Any

from trainmeter.integrations.adapter import Adapter, Site
from trainmeter.integrations.view import FrameworkControl


class IgniteControl(FrameworkControl):
    """An Ignite trainer ``Engine``: the adapter's handler calls ``engine.terminate()`` after the iteration; Ignite's
    savers need the user's objects, so trainmeter's own save writes the model."""

    name = "ignite"


def _inside_a_run(adapter: Adapter, engine: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    return bool(adapter.wing.depth)  # the trainer's run is the fit in progress


class IgniteAdapter(Adapter):
    """``ignite.engine.engine.Engine.run``: the outermost is the trainer's, one inside it an evaluator's."""

    framework = "ignite"
    control = IgniteControl
    sites = (Site(module="ignite.engine.engine", owner="Engine", attr="run", phase="eval", when=_inside_a_run),)

    def wrap(self, site: Site, original: Any) -> Any:
        """The trainer's run as a fit; an evaluator's run inside it as an eval span whose metrics are recorded."""
        wing, fit = self.wing, self.fit(site, original)

        @functools.wraps(original)
        def run(engine: Any, *args: Any, **kwargs: Any) -> Any:
            if not wing.depth or not wing.gate.here():
                return fit(engine, *args, **kwargs)
            state = original(engine, *args, **kwargs)
            wing.framework_logs("ignite", getattr(state, "metrics", None))
            return state

        return self.span(site, run)

    def begin(self, site: Site, engine: Any, args: tuple[Any, ...],
              kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any], Any]:
        from ignite.engine import Events

        engine.add_event_handler(Events.ITERATION_COMPLETED, self._iteration_completed)
        return args, kwargs, Events.ITERATION_COMPLETED

    def end(self, engine: Any, extra: Any) -> None:
        engine.remove_event_handler(self._iteration_completed, extra)

    def _iteration_completed(self, engine: Any) -> None:
        if self.wing.stop_requested("ignite"):
            engine.terminate()
