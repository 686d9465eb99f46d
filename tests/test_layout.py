"""The package layout shows the architecture: core imports no wing; record reads the run through a Protocol."""

from __future__ import annotations

import ast
from pathlib import Path

import trainmeter

PKG = Path(trainmeter.__file__).parent
WINGS = tuple(sorted(p.name for p in PKG.iterdir() if (p / "__init__.py").exists() and p.name != "core"))


def _imports(path: Path) -> set[str]:
    """Every module named by an import statement anywhere in ``path`` (lazy and TYPE_CHECKING ones too)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
            if node.module.startswith("trainmeter"):  # ``from trainmeter.core import monitor`` names the module
                out.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


def test_core_imports_no_module_outside_core():
    offenders = {
        f"{path.relative_to(PKG)} -> {mod}"
        for path in (PKG / "core").glob("*.py")
        for mod in _imports(path)
        if mod.startswith("trainmeter") and not mod.startswith("trainmeter.core")
    }
    assert offenders == set()


def test_record_never_imports_the_monitor():
    offenders = {
        f"{path.relative_to(PKG)} -> {mod}"
        for path in (PKG / "record").glob("*.py")
        for mod in _imports(path)
        if mod in ("trainmeter.core.monitor", "trainmeter.core.probes")
    }
    assert offenders == set()


def test_every_extension_wing_has_an_extension_module_with_start_and_stop():
    wings = [w for w in WINGS if (PKG / w / "extension.py").exists()]
    assert {"compute", "gpu", "host", "integrations", "timesplit"} <= set(wings)
    for wing in wings:
        tree = ast.parse((PKG / wing / "extension.py").read_text(encoding="utf-8"))
        classes = [n for n in tree.body if isinstance(n, ast.ClassDef)]
        methods = {f.name for c in classes for f in c.body if isinstance(f, ast.FunctionDef)}
        assert {"start", "stop"} <= methods, wing


def test_no_module_is_left_at_the_top_besides_the_face_and_the_wiring():
    top = {p.stem for p in PKG.glob("*.py")}
    assert top == {"__init__", "_version", "api", "magic", "options", "sizes", "extensions", "checkup"}
    assert {p.name for p in PKG.iterdir() if p.is_dir() and (p / "__init__.py").exists()} == {"core", *WINGS}



# The one fake the package keeps: the core's injected clock (core/clock.py; runs driven by hand take it). Scripted
# hardware fakes (GPU backends, vendor modules) live in tests/fakes/ and ship in no wheel.
FAKES_ALLOWED = {"FakeClock"}


def test_no_runtime_module_imports_the_tests_or_defines_a_fake_backend():
    imports_tests = {f"{path.relative_to(PKG)} -> {mod}" for path in PKG.rglob("*.py")
                     for mod in _imports(path) if mod == "tests" or mod.startswith("tests.")}
    assert imports_tests == set()
    fake_files = {str(p.relative_to(PKG)) for p in PKG.rglob("*.py") if "fake" in p.stem.lower()}
    assert fake_files == set()
    fake_classes = {f"{path.relative_to(PKG)}:{node.lineno} {node.name}" for path in PKG.rglob("*.py")
                    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
                    if isinstance(node, ast.ClassDef) and node.name.lstrip("_").lower().startswith("fake")
                    and node.name not in FAKES_ALLOWED}
    assert fake_classes == set()

# -- the extension contract (docs/contracts/EXTENSIONS.md) ------------------------------------------------------
def _wing_of(path: Path) -> str:
    return path.relative_to(PKG).parts[0]


def _wing_modules(wing: str) -> list[Path]:
    return sorted((PKG / wing).glob("*.py"))


def _private_names(paths: list[Path]) -> set[str]:
    """Private names a set of modules owns: ``self._x``/``cls._x`` attributes and ``_x`` functions, classes, globals."""
    out: set[str] = set()
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id in ("self", "cls") and node.attr.startswith("_")):
                out.add(node.attr)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name.startswith("_"):
                out.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) and node.id.startswith("_"):
                out.add(node.id)
    return out


def _private_reads(source: str) -> list[tuple[int, str]]:
    """``(line, name)`` of private attributes read on objects other than ``self``/``cls`` (``x._y``, and
    ``getattr``/``hasattr``/``setattr`` with a constant ``"_y"``); dunders left out."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
                and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))):
            out.append((node.lineno, node.attr))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id in ("getattr", "hasattr", "setattr") and len(node.args) > 1
              and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)
              and node.args[1].value.startswith("_") and not node.args[1].value.startswith("__")):
            out.append((node.lineno, node.args[1].value))
    return out


# A forked child takes over the record wing's inherited run log (docs/spec.md section 19); it goes behind a
# method of the record wing's own when the fork's re-homing is rebuilt.
PRIVATE_READS_ALLOWED: dict[str, set[str]] = {}


def _cross_wing_private_reads() -> set[str]:
    owners = {wing: _private_names(_wing_modules(wing)) for wing in WINGS}
    core = _private_names(sorted((PKG / "core").glob("*.py")))  # the core's privates: a collision is not a wing's
    offenders = set()
    for wing in WINGS:
        others = {name: other for other in WINGS if other != wing for name in owners[other]}
        for path in _wing_modules(wing):
            allowed = PRIVATE_READS_ALLOWED.get(str(path.relative_to(PKG)), set())
            for line, name in _private_reads(path.read_text(encoding="utf-8")):
                if name in others and name not in owners[wing] and name not in core and name not in allowed:
                    offenders.add(f"{path.relative_to(PKG)}:{line} reads {others[name]}'s {name}")
    return offenders


def test_the_private_read_check_sees_attribute_and_getattr_reads():
    source = "def f(m, s):\n    return m.extension('gpu')._sampler, getattr(s, '_opener', None), self._own\n"
    assert _private_reads(source) == [(2, "_sampler"), (2, "_opener")]


def test_no_wing_reads_another_wings_private_attribute():
    assert _cross_wing_private_reads() == set()


def _attribute_uses(path: Path, attr: str) -> list[int]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr == attr]


def test_no_fan_out_over_the_extensions_outside_the_dispatcher():
    """Only core/dispatch.py goes over the extensions (monitor.py exposes the tuple as a read-only property)."""
    offenders = {f"{path.relative_to(PKG)}:{line}" for path in PKG.rglob("*.py")
                 if str(path.relative_to(PKG)) not in ("core/dispatch.py", "core/monitor.py")
                 for line in _attribute_uses(path, "extensions")}
    assert offenders == set()


def test_wings_find_each_other_only_through_published_views():
    """``monitor.extension(name)`` hands out a view; the dispatcher's ``find`` (the object itself) is the wiring's."""
    offenders = {f"{path.relative_to(PKG)}:{line}" for wing in WINGS for path in _wing_modules(wing)
                 for line in _attribute_uses(path, "find")
                 if "dispatch.find" in path.read_text(encoding="utf-8").splitlines()[line - 1]}
    assert offenders == set()


# Modules a wing offers the others besides its view (``<wing>/view.py``): pure functions, saved-run readers and
# shared drawing, holding no run state of that wing. Never an ``extension`` module.
PUBLISHED = {
    "record": {"runs", "runlog", "events", "recorder", "textline", "passport", "safe_read"},  # saved runs, log, sinks
    "widget": {"view_model", "frame", "widget", "x_axis", "show",  # the follower's dashboard (ranks/watch.py)
               "snapshot",  # the static SVG chart, tm.compare's figures (comparison/figures.py)
               "look"},  # the one colours file's names (widget/colours.json): tm.compare's palettes and muted text
    "gpu": {"nvml", "ladder"},  # the ladder
    "ranks": {"seating", "merge", "watch"},  # a rank's seat, the merged section, tm.display(follow=True)
    "compute": {"card", "mfu", "eta",  # the compute tiles from a passport; the one MFU and ETA rules (docs/spec.md section 5)
                "flops", "peaks"},  # the one convention rule (a launch's MFU: ranks/launch_mfu.py); a passport's peak read back
    "optim": {"smoothing"},  # the one loss EMA: the text line's, the passport's, the chart's twin
    "energy": {"summary"},  # the energy tile, likewise
    "verdicts": {"markers"},  # chart markers from saved verdicts
}


def _cross_wing_imports() -> set[tuple[str, str]]:
    out = set()
    for wing in WINGS:
        for path in _wing_modules(wing):
            for mod in _imports(path):
                parts = mod.split(".")
                if parts[0] == "trainmeter" and len(parts) > 2 and parts[1] in WINGS and parts[1] != wing:
                    out.add((str(path.relative_to(PKG)), mod))
    return out


def test_wings_import_each_other_only_through_views_and_published_modules():
    offenders = {f"{where} -> {mod}" for where, mod in _cross_wing_imports()
                 if mod.split(".")[2] != "view" and mod.split(".")[2] not in PUBLISHED.get(mod.split(".")[1], ())}
    assert offenders == set()
    assert not any(mod.endswith(".extension") for _, mod in _cross_wing_imports())


def _extension_classes() -> list[type]:
    import importlib

    out = []
    for wing in WINGS:
        if (PKG / wing / "extension.py").exists():
            module = importlib.import_module(f"trainmeter.{wing}.extension")
            out += [c for c in vars(module).values() if isinstance(c, type) and c.__module__ == module.__name__
                    and isinstance(vars(c).get("name"), str) and callable(getattr(c, "start", None))]
    return out


def test_every_extension_class_conforms_to_the_protocol():
    import inspect

    from tests.core.contract_events import EVENTS
    from trainmeter.core.extension import Extension, ExtensionBase

    classes = _extension_classes()
    assert len(classes) >= 11
    protocol = {e.name for e in EVENTS}
    for cls in classes:
        assert issubclass(cls, ExtensionBase), cls
        assert not hasattr(cls, "interval_fields"), f"{cls.__name__}: interval_fields is on_report(report) now"
        for member in protocol:
            mine = getattr(cls, member)
            theirs = getattr(Extension, member, None)
            if not callable(mine) or not callable(theirs) or member == "on_step":
                continue
            wanted = len(inspect.signature(theirs).parameters) - 1  # without self
            try:
                inspect.signature(mine).bind(None, *range(wanted))  # the core's call binds
            except TypeError:
                raise AssertionError(f"{cls.__name__}.{member}{inspect.signature(mine)} does not take the "
                                     f"contract's {wanted} argument(s)") from None
        on_step = cls.on_step
        assert on_step is None or len(inspect.signature(on_step).parameters) == 1, cls
        for attr in ("requires", "precedes"):
            assert isinstance(getattr(cls, attr), tuple), (cls, attr)


def _modules() -> list[Path]:
    return sorted(p for p in PKG.rglob("*.py") if "__pycache__" not in p.parts)


def test_no_module_is_over_400_lines():
    assert {str(p.relative_to(PKG)): n for p in _modules() if (n := len(p.read_text().splitlines())) > 400} == {}


def test_every_module_opens_with_a_docstring_whose_first_line_says_what_it_owns():
    offenders = []
    for path in _modules():
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
        if not doc or not doc.splitlines()[0].strip():
            offenders.append(str(path.relative_to(PKG)))
    assert offenders == []


def test_comments_cite_the_spec_never_issues_seeds_or_paths_outside_the_repository():
    import re

    outside = re.compile(r"\bissue \d+|\bseed 0\d\d|shared/reference|shared/seeds|/work/", re.IGNORECASE)
    offenders = [f"{path.relative_to(PKG)}:{n}" for path in _modules()
                 for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if outside.search(line)]
    assert offenders == []


def test_no_wing_reads_a_private_attribute_of_the_monitor():
    import re

    reads = re.compile(r"\b(?:monitor|m|self\._m|run)\._[a-z]\w*")
    offenders = [f"{path.relative_to(PKG)}:{n}" for wing in WINGS for path in _wing_modules(wing)
                 for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if reads.search(line)]
    assert offenders == []


# -- the core is made of objects that own their state ------------------------------------------------------------
# The only base classes a class in core/ may name: contracts (Protocol; the extension contract's base, which the wings
# subclass), exceptions and warnings, and typing's record types. Anything else is a mixin sharing its subclass's state.
CORE_BASES_ALLOWED = {"object", "Protocol", "NamedTuple", "TypedDict", "Enum", "ExtensionBase", "Thread"}  # Thread: OurThread


def _classes(paths: list[Path]) -> list[tuple[Path, ast.ClassDef]]:
    return [(path, node) for path in paths
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))) if isinstance(node, ast.ClassDef)]


def _core_classes() -> list[tuple[Path, ast.ClassDef]]:
    return _classes(sorted((PKG / "core").glob("*.py")))


def _base_name(base: ast.expr) -> str:
    """``Protocol`` for ``Protocol``, ``typing.Protocol`` and ``Protocol[T]``."""
    if isinstance(base, ast.Subscript):
        base = base.value
    return base.attr if isinstance(base, ast.Attribute) else ast.unparse(base)


def _allowed_base(name: str) -> bool:
    import builtins

    builtin = getattr(builtins, name, None)
    return name in CORE_BASES_ALLOWED or (isinstance(builtin, type) and issubclass(builtin, BaseException))


def test_no_class_in_the_core_has_a_mixin_base():
    offenders = {f"{path.relative_to(PKG)}:{node.lineno} {node.name}({_base_name(base)})"
                 for path, node in _core_classes() for base in node.bases if not _allowed_base(_base_name(base))}
    assert offenders == set()


def _mixins(classes: list[ast.ClassDef]) -> set[str]:
    """The names of ``classes`` that are mixins: methods but no ``__init__`` (nor a dataclass's), so the state their
    methods use is made by a subclass; contracts (an allowed base: a Protocol, the no-op extension base) are not."""
    def methods(node: ast.ClassDef) -> set[str]:
        return {n.name for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}

    return {node.name for node in classes if methods(node) and "__init__" not in methods(node)
            and not node.decorator_list and not _allowed_base(node.name)
            and not any(_allowed_base(_base_name(b)) for b in node.bases)}


def test_no_class_in_a_wing_has_a_mixin_base():
    """A wing's class may specialise a class that owns its state (a framework control, an adapter), never a mixin:
    a part of the wing is an object the wing holds."""
    everything = [node for _, node in _classes(sorted(PKG.rglob("*.py")))]
    mixins = _mixins(everything)
    offenders = {f"{path.relative_to(PKG)}:{node.lineno} {node.name}({_base_name(base)})"
                 for wing in WINGS for path, node in _classes(_wing_modules(wing)) for base in node.bases
                 if _base_name(base) in mixins}
    assert offenders == set()
    spans = ast.parse("class Spans:\n    def f(self):\n        return self.x\n"
                      "class Owner(Spans):\n    def __init__(self):\n        self.x = 0\n").body
    assert _mixins(spans) == {"Spans"}  # type: ignore[arg-type]


def _targets(node: ast.AST) -> list[ast.expr]:
    """What an assignment statement writes (tuple targets unpacked)."""
    if isinstance(node, ast.Assign):
        found = list(node.targets)
    elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        found = [node.target]
    else:
        return []
    out: list[ast.expr] = []
    while found:
        target = found.pop()
        if isinstance(target, (ast.Tuple, ast.List)):
            found.extend(target.elts)
        else:
            out.append(target)
    return out


def _method_writes(cls: ast.ClassDef) -> list[tuple[str, ast.expr]]:
    """``(self, target)`` of every assignment in the methods of ``cls`` (``self``: each method's first parameter)."""
    return [(method.args.args[0].arg, target) for method in cls.body
            if isinstance(method, (ast.FunctionDef, ast.AsyncFunctionDef)) and method.args.args
            for node in ast.walk(method) for target in _targets(node)]


def _is_self(node: ast.expr, me: str) -> bool:
    return isinstance(node, ast.Name) and node.id == me


def _self_writes(cls: ast.ClassDef) -> set[str]:
    """The ``self.<attr>`` names the methods of ``cls`` assign."""
    return {target.attr for me, target in _method_writes(cls)
            if isinstance(target, ast.Attribute) and _is_self(target.value, me)}


def test_no_attribute_of_a_core_object_is_written_by_two_classes_of_its_hierarchy():
    classes = {node.name: node for _, node in _core_classes()}

    def ancestors(name: str) -> set[str]:
        found: set[str] = set()
        todo = [_base_name(b) for b in classes[name].bases]
        while todo:
            base = todo.pop()
            if base in classes and base not in found:
                found.add(base)
                todo.extend(_base_name(b) for b in classes[base].bases)
        return found

    offenders = {f"{name}.{attr} and {base}.{attr}" for name in classes for base in ancestors(name)
                 for attr in _self_writes(classes[name]) & _self_writes(classes[base])}
    assert offenders == set()


def test_the_hierarchy_check_sees_a_mixin_writing_its_owners_attribute():
    tree = ast.parse("class Part:\n    def f(self):\n        self.x, self.y = 1, 2\n"
                     "class Owner(Part):\n    def __init__(this):\n        this.x = 0\n")
    part, owner = (n for n in tree.body if isinstance(n, ast.ClassDef))
    assert _self_writes(part) & _self_writes(owner) == {"x"}
    assert _base_name(owner.bases[0]) == "Part" and not _allowed_base("Part") and _allowed_base("UserWarning")
    holder = ast.parse("class Owner:\n    def f(self):\n        self.part.x = 1\n        self._hot.y = 2\n"
                       "        self.z = 3\n").body[0]
    assert _held_writes(holder) == {"self.part.x"}


# The state objects several parts write by design: the probes' per-call state (core/probe_state.py ProbeState: the
# wrappers close over it, so the steady step reads slots, never a part's attributes) and a threading.local.
SHARED_STATE = {"hot", "_hot", "_busy"}


def _held_writes(cls: ast.ClassDef) -> set[str]:
    """``self.<part>.<attr>`` targets the methods of ``cls`` assign, besides the shared state objects'."""
    return {ast.unparse(target) for me, target in _method_writes(cls)
            if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Attribute)
            and _is_self(target.value.value, me) and target.value.attr not in SHARED_STATE}


def test_no_core_object_writes_an_attribute_of_a_part_it_holds():
    """A part's attributes are written by its own methods: the owner and the other parts call them."""
    offenders = {f"{path.relative_to(PKG)}:{node.name} {target}" for path, node in _core_classes()
                 for target in _held_writes(node)}
    assert offenders == set()


# What a part of the run holds the run as: it reads the run and calls its methods, and never writes its attributes.
RUN_NAMES = ("self._monitor", "self._run", "self._m", "monitor", "run", "m")


def _run_writes(source: str) -> list[tuple[int, str]]:
    """``(line, target)`` of assignments to an attribute (or item) reached from the run, and ``setattr(run, ...)``."""
    out = []
    for node in ast.walk(ast.parse(source)):
        for target in _targets(node):
            if isinstance(target, (ast.Attribute, ast.Subscript)):
                text = ast.unparse(target)
                if any(text.startswith(f"{name}.") for name in RUN_NAMES):
                    out.append((node.lineno, text))
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr"
                and node.args and ast.unparse(node.args[0]) in RUN_NAMES):
            out.append((node.lineno, f"setattr({ast.unparse(node.args[0])}, ...)"))
    return out


def test_the_run_write_check_sees_attribute_item_and_setattr_writes():
    source = ("def f(self, monitor, run):\n    self._monitor.lanes.x = 1\n    monitor.steps += 1\n"
              "    run.info['a'] = 2\n    setattr(run, 'b', 3)\n    self._m = monitor\n    own.x = 4\n")
    assert _run_writes(source) == [(2, "self._monitor.lanes.x"), (3, "monitor.steps"), (4, "run.info['a']"),
                                   (5, "setattr(run, ...)")]


def test_no_part_of_the_core_writes_the_runs_attributes():
    offenders = {f"{path.relative_to(PKG)}:{line} {target}" for path in sorted((PKG / "core").glob("*.py"))
                 for line, target in _run_writes(path.read_text(encoding="utf-8"))}
    assert offenders == set()


# -- the run context (core/context.py): the one surface wings and sinks reach a run through ---------------------
# Modules that build and own the Monitor (the public API, the wiring, the ranks wing's process-level fork and
# autostart handlers, which act on the process's active run through core methods): every other module outside
# core/ is a wing or a sink and sees a RunContext.
OWNERS = {"api.py", "magic.py", "extensions.py", "ranks/autostart.py", "ranks/fork.py"}
# How a wing or sink names the run: these names and attributes, a parameter annotated RunContext, and a local
# assigned from one of them (``m = self._monitor``).
CONTEXT_NAMES = {"monitor", "ctx"}
CONTEXT_ATTRS = {"_monitor", "monitor", "_m", "_ctx", "_run"}


def _context_modules() -> list[Path]:
    return [p for p in _modules() if p.parts[len(PKG.parts)] != "core" and str(p.relative_to(PKG)) not in OWNERS]


def _context_reads(source: str | ast.AST) -> list[tuple[int, str]]:
    """``(line, attribute)`` of every attribute read on the run context in ``source`` (a module's text or a parsed
    node; ``getattr`` with a constant name too), by the naming convention above."""
    tree = ast.parse(source) if isinstance(source, str) else source
    out = []

    def is_context(node: ast.expr, names: set[str]) -> bool:
        if isinstance(node, ast.Name):
            return node.id in names
        return (isinstance(node, ast.Attribute) and node.attr in CONTEXT_ATTRS and isinstance(node.value, ast.Name)
                and node.value.id == "self")

    for fn in [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))]:
        names = set(CONTEXT_NAMES)
        args = fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs
        names |= {a.arg for a in args if a.annotation is not None and "RunContext" in ast.unparse(a.annotation)}
        for node in ast.walk(fn):  # locals bound from the context, as in ``m = self._monitor``
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                pairs = ([(node.targets[0], node.value)] if not isinstance(node.targets[0], ast.Tuple) else
                         list(zip(node.targets[0].elts, getattr(node.value, "elts", []), strict=False)))
                names |= {t.id for t, v in pairs if isinstance(t, ast.Name) and is_context(v, names)}
        for node in ast.walk(fn):
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load) and is_context(node.value, names):
                out.append((node.lineno, node.attr))
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr",
                  "hasattr") and len(node.args) > 1 and is_context(node.args[0], names)
                  and isinstance(node.args[1], ast.Constant)):
                out.append((node.lineno, str(node.args[1].value)))
    return sorted(set(out))


def test_the_context_check_sees_reads_through_names_attributes_annotations_and_locals():
    source = ("def f(self, monitor, run: 'RunContext', other):\n    m = self._monitor\n    monitor.steps\n"
              "    run.dispatch\n    m.registry\n    getattr(self._m, 'lifecycle', None)\n    other.registry\n")
    assert _context_reads(source) == [(3, "steps"), (4, "dispatch"), (5, "registry"), (6, "lifecycle")]


def test_wings_and_sinks_read_the_run_only_through_the_contexts_published_members():
    from trainmeter.core.context import PUBLISHED
    from trainmeter.core.reports import ReportSnapshot

    allowed = PUBLISHED | set(ReportSnapshot.__slots__)  # a sink's steady report: the context and the report's figures
    offenders = {f"{path.relative_to(PKG)}:{line} {attr}" for path in _context_modules()
                 for line, attr in _context_reads(path.read_text(encoding="utf-8"))
                 if attr not in allowed and not attr.startswith("__")}
    assert offenders == set()


def test_no_wing_or_sink_imports_the_monitor():
    offenders = {f"{path.relative_to(PKG)} -> {mod}" for path in _context_modules() for mod in _imports(path)
                 if mod.startswith("trainmeter.core.monitor")}
    assert offenders == set()


# What a report read on the report worker takes from its Report, never from the live run (docs/spec.md section 20).
LIVE_RUN = {"steps", "tokens", "token_unit", "elapsed_s", "interval", "session", "memory", "phases", "reports",
            "text_line", "status", "steps_state", "step_series"}


def _worker_report_reads(source: str) -> list[tuple[str, int, str]]:
    """``(class, line, attribute)`` of live-run reads in ``on_report``/``text_fields`` of a ``report_on_worker``
    class."""
    out = []
    for cls in [n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.ClassDef)]:
        flag = any(isinstance(s, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "report_on_worker"
                                                     for t in s.targets)
                   and isinstance(s.value, ast.Constant) and s.value.value is True for s in cls.body)
        for fn in cls.body if flag else ():
            if isinstance(fn, ast.FunctionDef) and fn.name in ("on_report", "text_fields"):
                out += [(cls.name, line, attr) for line, attr in _context_reads(fn) if attr in LIVE_RUN]
    return out


def test_the_worker_report_check_sees_a_live_read():
    source = ("class W:\n    report_on_worker = True\n    def on_report(self, report):\n        m = self._m\n"
              "        return m.interval, report.steps\n")
    assert _worker_report_reads(source) == [("W", 5, "interval")]


def test_wings_on_the_report_worker_read_the_run_from_their_report():
    offenders = {f"{path.relative_to(PKG)}: {cls} line {line} reads {attr}" for path in _context_modules()
                 for cls, line, attr in _worker_report_reads(path.read_text(encoding="utf-8"))}
    assert offenders == set()


def test_no_wing_or_sink_writes_the_runs_attributes():
    offenders = {f"{path.relative_to(PKG)}:{line} {target}" for path in _context_modules()
                 for line, target in _run_writes(path.read_text(encoding="utf-8"))}
    assert offenders == set()
