"""IPython magics: ``%%trainmeter`` (run a cell under the monitor; flags validated first) and ``%trainmeter VERB``."""

from __future__ import annotations

import argparse
import ast
import shlex
import sys
from pathlib import Path
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class

from trainmeter.options import FLAGS, MonitorOptions, flags_help, make_options
from trainmeter.record.runs import RUNS_SHOWN

VERBS = ("runs", "doctor", "help")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # argparse would exit; we raise instead
        valid = " ".join(sorted(a for act in self._actions for a in act.option_strings if a.startswith("--")))
        raise UsageError(f"%%trainmeter: {message}. Valid flags: {valid}")


VERB_HELP: tuple[tuple[str, str], ...] = (
    ("%trainmeter runs [--dir PATH] [--last N | --all]",
     f"saved runs, newest first (the last {RUNS_SHOWN} unless --last N or --all): started (UTC), name, status, "
     "duration, steps, tokens, last loss, path; a run without a passport is read from its log"),
    ("%trainmeter doctor", "what trainmeter can see on this machine (torch, CUDA, NVML, psutil, widget)"),
    ("%trainmeter help", "this text"),
)


def parse_flags(line: str) -> MonitorOptions:
    """Parse and validate a ``%%trainmeter`` flag line (``UsageError`` naming the bad flag or value, and what is valid)."""
    try:
        argv = shlex.split(line)
    except ValueError as exc:
        raise UsageError(f"%%trainmeter: cannot parse flags {line!r}: {exc}") from None
    flags = [word.split("=", 1)[0] for word in argv if word.startswith("--")]
    twice = next((flag for i, flag in enumerate(flags) if flag in flags[:i]), None)  # the first one repeated
    if twice is not None:
        raise UsageError(f"%%trainmeter: {twice} given more than once; give each flag at most once")
    parser = _Parser(prog="%%trainmeter", add_help=False, allow_abbrev=False)  # from FLAGS, its one source
    groups: dict[str, Any] = {}
    for f in FLAGS:
        target = groups.setdefault(f.group, parser.add_mutually_exclusive_group()) if f.group else parser
        kind = {"nargs": "?", "const": f.bare} if f.bare else {} if f.metavar else {"action": "store_false"}
        target.add_argument(f.flag, dest=f.dest, **kind)
    try:
        return make_options(**vars(parser.parse_args(argv)))
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
        return run_cell(self.shell, cell, parse_flags(line))

    def _show(self, text: str, html: Any) -> None:
        """Print ``text``; in a notebook, display ``html`` (an object with an HTML form and ``text`` as text/plain)."""
        if not _in_notebook(self.shell):
            print(text)
            return
        from IPython.display import display

        display(html)

    def _verb(self, line: str) -> Any:
        try:
            words = shlex.split(line)
        except ValueError as exc:
            raise UsageError(f"%trainmeter: cannot parse {line!r}: {exc}") from None
        verb = words[0] if words else "help"
        if verb not in VERBS:
            raise UsageError(f"%trainmeter: unknown verb {verb!r}; valid verbs: {', '.join(VERBS)}")
        if verb == "runs":
            table = _runs_table(words[1:])
            self._show(table.text(), table)  # an HTML table, with the text table as text/plain
            return None
        if verb == "help" and len(words) > 1:
            raise UsageError(f"%trainmeter help: unexpected {' '.join(words[1:])!r}; usage: %trainmeter help")
        if verb == "doctor":
            from trainmeter.checkup import doctor, format_doctor

            text = format_doctor(doctor())
        else:  # every flag (from trainmeter.options.FLAGS) and every verb
            width = max(len(usage) for usage, _ in VERB_HELP)
            verbs = [f"  {usage.ljust(width)}  {what}" for usage, what in VERB_HELP]
            text = flags_help() + "\n\nVerbs (line magic):\n" + "\n".join(verbs)
        self._show(text, TextBlock(text, verb))
        return None


def _runs_table(rest: list[str]) -> Any:
    from trainmeter.record.runs import runs_table

    usage = "usage: %trainmeter runs [--dir PATH] [--last N | --all]"
    root: Path | None = None
    limit: int | None = RUNS_SHOWN
    it = iter(rest)
    for word in it:
        if word == "--all":
            limit = None
        elif word in ("--dir", "--last"):
            value = next(it, None)
            if value is None or not value.strip():
                raise UsageError(f"%trainmeter runs: {word} needs a value; {usage}")
            if word == "--dir":
                root = Path(value).expanduser()
            elif not value.isdigit() or int(value) < 1:
                raise UsageError(f"%trainmeter runs: invalid value {value!r} for --last: expected a positive "
                                 f"whole number; {usage}")
            else:
                limit = int(value)
        else:
            raise UsageError(f"%trainmeter runs: unexpected {word!r}; {usage}")
    return runs_table(root, limit)


def run_cell(shell: Any, cell: str, options: MonitorOptions) -> Any:
    """Run ``cell`` in the user's namespace under a monitor; return its last expression's value."""
    __tracebackhide__ = True  # noqa: F841
    from trainmeter.api import MonitoredBlock

    code = shell.transform_cell(cell)
    tree = shell.compile.ast_parse(code)
    last = ast.Expression(tree.body.pop().value) if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    filename = shell.compile.cache(code, _cell_number(shell))
    body = shell.compile(tree, filename, "exec")
    tail = shell.compile(last, filename, "eval") if last is not None else None
    result = None  # a stopped run (StopTraining, caught by the block) has no last value
    ns = shell.user_ns
    with MonitoredBlock(options, show_widget=options.widget and _in_notebook(shell)):
        exec(body, ns)
        result = eval(tail, ns) if tail is not None else None
    return result


def _cell_number(shell: Any) -> int:
    """The running cell's number as its traceback names it (``Cell In[N]``): the one IPython compiled it under."""
    names = getattr(shell.compile, "_filename_map", None) or {}
    frame = sys._getframe(1)
    while frame is not None:
        number = names.get(frame.f_code.co_filename)
        if isinstance(number, int):
            return number
        frame = frame.f_back
    return int(shell.execution_count)


class TextBlock:
    """A verb's text for a notebook: ``text/html`` that wraps at spaces, never mid-word (JupyterLab's stream output
    breaks anywhere) nor at a hyphen (``--budget-tokens`` stays whole: a browser breaks after a hyphen unless told
    not to), and ``text/plain``."""

    def __init__(self, text: str, kind: str) -> None:
        self.text, self.kind = text, kind

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, str]:
        import html
        import re

        body = re.sub(r"\S*\w-\S*", lambda w: f'<span style="white-space:nowrap">{w.group()}</span>',
                      html.escape(self.text))
        return {"text/plain": self.text,
                "text/html": f'<pre class="trainmeter-{self.kind}" style="white-space:pre-wrap;word-break:normal;'
                             f'overflow-wrap:normal;margin:0">{body}</pre>'}

    def __repr__(self) -> str:
        return self.text


def load_ipython_extension(ipython: Any) -> None:
    """Register the magics (``%load_ext trainmeter``) and import ahead what a monitored cell's start would."""
    ipython.register_magics(TrainmeterMagics)
    from trainmeter.extensions import preload

    preload()
