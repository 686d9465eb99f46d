"""IPython magics: ``%%trainmeter`` (run a cell under the monitor) and ``%trainmeter VERB``.

Flags are parsed and validated before anything runs and before a run folder is
made; a bad flag raises ``UsageError`` naming the value and what is valid.
"""

from __future__ import annotations

import argparse
import ast
import shlex
from pathlib import Path
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class

from trainmeter.options import MonitorOptions, make_options

VERBS = ("runs", "doctor", "help")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # argparse would exit; we raise instead
        valid = " ".join(sorted(a for act in self._actions for a in act.option_strings if a.startswith("--")))
        raise UsageError(f"%%trainmeter: {message}. Valid flags: {valid}")


def build_parser() -> argparse.ArgumentParser:
    """The ``%%trainmeter`` flag parser."""
    p = _Parser(prog="%%trainmeter", add_help=False, allow_abbrev=False)
    p.add_argument("--name")
    budget = p.add_mutually_exclusive_group()
    budget.add_argument("--budget-tokens")
    budget.add_argument("--budget-steps")
    budget.add_argument("--budget-flops")
    p.add_argument("--dir", dest="run_dir")
    p.add_argument("--interval", dest="interval_s")
    p.add_argument("--no-widget", action="store_true")
    p.add_argument("--convention")
    p.add_argument("--peak-tflops")
    p.add_argument("--peak-source")
    p.add_argument("--layers")
    p.add_argument("--d-model")
    p.add_argument("--seq-len")
    p.add_argument("--vocab")
    p.add_argument("--gpus")
    p.add_argument("--memory-snapshot-step")
    p.add_argument("--no-tap", action="store_true")
    p.add_argument("--grid-gco2-per-kwh")
    p.add_argument("--grid-source")
    p.add_argument("--max-series")
    return p


def parse_flags(line: str) -> MonitorOptions:
    """Parse and validate a ``%%trainmeter`` flag line.

    Raises:
        UsageError: Naming the bad flag or value and what is valid.
    """
    try:
        argv = shlex.split(line)
    except ValueError as exc:
        raise UsageError(f"%%trainmeter: cannot parse flags {line!r}: {exc}") from None
    seen: set[str] = set()
    for word in argv:
        flag = word.split("=", 1)[0]
        if flag.startswith("--"):
            if flag in seen:
                raise UsageError(f"%%trainmeter: {flag} given more than once; give each flag at most once")
            seen.add(flag)
    ns = build_parser().parse_args(argv)
    kwargs = vars(ns)
    widget = not kwargs.pop("no_widget")
    tap = not kwargs.pop("no_tap")
    try:
        return make_options(widget=widget, tap=tap, **kwargs)
    except ValueError as exc:
        raise UsageError(f"%%trainmeter: {exc}") from None


def _in_notebook(shell: Any) -> bool:
    return type(shell).__name__ == "ZMQInteractiveShell"


@magics_class
class TrainmeterMagics(Magics):
    """The ``trainmeter`` line and cell magic."""

    @line_cell_magic
    def trainmeter(self, line: str, cell: str | None = None) -> Any:
        """``%%trainmeter [flags]`` runs the cell monitored; ``%trainmeter runs|doctor|help``."""
        __tracebackhide__ = True  # noqa: F841 (IPython hides this frame in tracebacks)
        if cell is None:
            return self._verb(line)
        options = parse_flags(line)
        return run_cell(self.shell, cell, options)

    def _verb(self, line: str) -> Any:
        try:
            words = shlex.split(line)
        except ValueError as exc:
            raise UsageError(f"%trainmeter: cannot parse {line!r}: {exc}") from None
        verb = words[0] if words else "help"
        if verb == "runs":
            from trainmeter.record.runs import format_runs, runs

            rest = words[1:]
            if rest and not (len(rest) == 2 and rest[0] == "--dir" and rest[1].strip()):
                raise UsageError(f"%trainmeter runs: unexpected {' '.join(rest)!r}; usage: %trainmeter runs [--dir PATH]")
            root = Path(rest[1]).expanduser() if rest else None
            print(format_runs(runs(root)))
            return None
        if verb == "doctor":
            from trainmeter.checkup import doctor, format_doctor

            print(format_doctor(doctor()))
            return None
        if verb == "help":
            print("%%trainmeter [--name NAME] [--budget-tokens 20B | --budget-steps N | --budget-flops 1e21] "
                  "[--dir PATH] [--interval SECONDS] [--no-widget] ...\n"
                  "%trainmeter runs [--dir PATH]   list saved runs\n"
                  "%trainmeter doctor              what trainmeter can see here")
            return None
        raise UsageError(f"%trainmeter: unknown verb {verb!r}; valid verbs: {', '.join(VERBS)}")


def run_cell(shell: Any, cell: str, options: MonitorOptions) -> Any:
    """Run ``cell`` in the user's namespace under a monitor; return its last expression's value."""
    __tracebackhide__ = True  # noqa: F841
    from trainmeter.api import run_monitored

    code = shell.transform_cell(cell)
    tree = shell.compile.ast_parse(code)
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
    filename = shell.compile.cache(code, shell.execution_count)
    body = shell.compile(tree, filename, "exec")
    tail = shell.compile(last, filename, "eval") if last is not None else None
    show_widget = options.widget and _in_notebook(shell)
    from trainmeter.core.interrupts import HeldInterrupts
    from trainmeter.extensions import default_extensions, make_monitor

    monitor = make_monitor(options, text=not show_widget, extensions=default_extensions(options))
    sinks: list[Any] = []
    ns = shell.user_ns
    try:
        if show_widget:
            with HeldInterrupts() as held:  # the widget's thread is either started and closed below, or not
                sinks = _widget_sinks(monitor)
            held.deliver()
        with run_monitored(monitor):
            exec(body, ns)
            result = eval(tail, ns) if tail is not None else None
    finally:
        for sink in sinks:
            sink.close()
    return result


def _widget_sinks(monitor: Any) -> list[Any]:
    try:
        from trainmeter.widget.publisher import attach_widget
    except ImportError:
        return []
    try:
        return [attach_widget(monitor)]
    except Exception as exc:
        monitor.text = True
        monitor.warn_once("widget", f"live widget unavailable, using the text line: {exc!r}")
        return []


def load_ipython_extension(ipython: Any) -> None:
    """Register the magics (``%load_ext trainmeter``)."""
    ipython.register_magics(TrainmeterMagics)
