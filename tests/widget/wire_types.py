"""The widget's wire as types (docs/protocol.md; js/src/protocol.ts declares the same shapes), checked against the
golden state tests/fixtures/state_v2.json by pytest, as vitest parses it into the TS types. ``NotRequired``: a key a
sender may leave out; :func:`apply`: a patch applied as js/src/statestore.ts does; :func:`decode_frame`: a binary
frame read back (docs/protocol.md section 3). Only the tests import it."""

import json
import sys
from array import array
from dataclasses import dataclass
from typing import Any, Literal

from trainmeter.widget.frame import (
    _ALIGN,
    _LITTLE,
    _PREFIX,
    FRAME_MAGIC,
    FRAME_VERSION,
    X_KINDS,
    FrameError,
    SeriesColumns,
)
from trainmeter.widget.x_axis import X_MODES

if sys.version_info >= (3, 11):
    from typing import NotRequired, TypedDict
else:  # Python 3.10's TypedDict has no NotRequired; anywidget depends on typing_extensions
    from typing_extensions import NotRequired, TypedDict

# "unfinished": a replayed run that has no end record
Status = Literal["starting", "running", "completed", "interrupted", "failed", "stopped", "unfinished"]
XKind = Literal["step", "time"]
Pace = Literal["recent", "training-only", "session"]


# -- derivations (core/provenance.py Derivation.to_dict) ---------------------------------------------
class DerivationInput(TypedDict):
    """One input of a derivation: its value, unit, provenance and where it was read."""

    name: str
    value: float | str | None
    unit: str
    provenance: str
    source: str


class Derivation(TypedDict):
    """How a tile's value was worked out; on a tile, badged with its weakest input."""

    name: str
    formula: str
    value: float | None
    unit: str
    inputs: list[DerivationInput]
    missing: str | None
    provenance: NotRequired[str]
    provenance_note: NotRequired[str]


# -- tiles, progress, phases --------------------------------------------------------------------------
class Tile(TypedDict):
    """A headline number: ``value`` in ``unit``, or ``missing`` (what would enable it) when null."""

    id: str
    label: str
    value: float | None
    unit: str
    text: NotRequired[str]
    sub: NotRequired[str]
    provenance: NotRequired[str]
    missing: NotRequired[str]
    not_here: NotRequired[bool]  # ``missing`` is about this machine (no GPU, no power reading): folded into one line
    derivation: NotRequired[Derivation | None]
    derivations: NotRequired[list[Derivation]]
    alert: NotRequired[bool]  # drawn in the alert colour (a loss that went non-finite or diverged)


class Progress(TypedDict):
    """The progress bar: fraction of the budget, the ETA (s, null once the run ended) and its pace."""

    fraction: float
    eta_s: float | None
    pace: Pace
    label: str


# -- charts and markers -------------------------------------------------------------------------------
class Chart(TypedDict):
    """One chart: its series in drawing order; ``smoothed`` maps a raw series to its smoothed twin."""

    id: str
    title: str
    x: XKind
    unit: str
    series: list[str]
    log_y: NotRequired[bool]
    labels: NotRequired[dict[str, str]]
    smoothed: NotRequired[dict[str, str]]
    latest: NotRequired[dict[str, float | str | None]]  # a series' newest value as read ("nan"/"inf"): the legend's
    y_range: NotRequired[list[float | None]]  # [0, the device's total or None]: the y axis from 0 to at least that


class MarkerAt(TypedDict):
    """A marker's step on the other x axes (widget/x_axis.py ``place_markers``); ``None`` where unmapped."""

    tokens: float | None
    time: float | None


class Marker(TypedDict):
    """A verdict drawn on chart ``chart`` at ``step`` (verdicts/markers.py), ``at`` that step on the other axes."""

    kind: str
    step: int
    label: str
    sentence: str
    chart: str
    at: NotRequired[MarkerAt]


class XAxis(TypedDict):
    """What the step | tokens | time control needs besides the frames' mapped x columns (widget/x_axis.py)."""

    tokens_label: str
    tokens_missing: str | None
    time_label: str
    time_missing: str | None


class PhaseBar(TypedDict):
    """The phase bar: each phase's share of the time (phases with time, in ``phases_s``'s order), the largest."""

    shares: dict[str, float]
    top: str | None


# -- panels -------------------------------------------------------------------------------------------
class PanelRow(TypedDict):
    """One row of a key/value panel."""

    label: str
    value: float | str | None
    unit: str
    provenance: NotRequired[str]
    note: NotRequired[str | None]


class Panel(TypedDict):
    """A generic key/value panel (MFU, GPU, node, where the time goes)."""

    id: str
    title: str
    rows: list[PanelRow]
    note: NotRequired[str | None]
    # its values come at the first report: a box from the start, never the one-line "absent" form
    pending: NotRequired[bool]


# -- the look (widget/look.py) ------------------------------------------------------------------------
class TickRule(TypedDict):
    """The axis tick rule's numbers (widget/look.py): label counts and the steps tried, by preference."""

    max_ticks: int
    min_ticks: int
    linear_steps: list[float]
    log_steps: list[list[float]]


class Look(TypedDict):
    """Palette, layout ids and tick rule: what the live charts and the snapshot draw with."""

    palette: list[str]
    phase_colours: dict[str, str]
    main_charts: list[str]
    merged_panels: list[str]
    marker_max_points: int
    faint_alpha: str
    ticks: TickRule


# -- controls (widget/controls.py) -------------------------------------------------------------------
class ControlsPending(TypedDict):
    """Requests not yet honoured: who asked for a stop, a checkpoint (``None``: none)."""

    stop: str | None
    checkpoint: str | None


class ControlsStopped(TypedDict):
    """Who stopped the run and after which step."""

    by: str
    step: int


class CheckpointEntry(TypedDict):
    """One checkpoint written (passport.json ``checkpoints``)."""

    path: str
    step: int
    bytes: int | None
    seconds: float | None
    source: str


class RefusedCheckpoint(TypedDict):
    """A checkpoint refused, and why."""

    step: int
    by: str
    reason: str


class AlertEntry(TypedDict):
    """A fired alert: its rule, action, step and sentence; ``notify``: tell the page (title, notification)."""

    rule: str
    action: str
    step: int
    sentence: str
    notify: bool


class Controls(TypedDict):
    """The header's Stop/Checkpoint buttons and the alerts' banner (docs/protocol.md, "Controls": ``path``)."""

    run_id: str | None
    live: bool
    path: Literal["message", "file"] | None
    reason: str | None
    control_file: str | None
    pending: ControlsPending
    stopped: ControlsStopped | None
    checkpoints: list[CheckpointEntry]
    refused: list[RefusedCheckpoint]
    alerts: list[AlertEntry]


# -- the state ----------------------------------------------------------------------------------------
class State(TypedDict):
    """The ``state`` traitlet (view_model.py ``build_state``; ``rev``: protocol.md section 2); non-finite: null."""

    name: str
    status: Status
    loss_state: NotRequired[str | None]  # "nonfinite" | "diverged": the status says so (widget/facts.py loss_state)
    rev: NotRequired[int]
    elapsed_s: NotRequired[float]
    run_dir: NotRequired[str | None]
    run_rel: NotRequired[str | None]
    text_line: NotRequired[str]
    step: NotRequired[int]
    error: NotRequired[str | None]
    progress: NotRequired[Progress | None]
    tiles: NotRequired[list[Tile]]
    phases_s: NotRequired[dict[str, float]]
    phase_bar: NotRequired[PhaseBar]
    charts: NotRequired[list[Chart]]
    panels: NotRequired[list[Panel]]
    warnings: NotRequired[list[str]]
    markers: NotRequired[list[Marker]]
    x_axis: NotRequired[XAxis]
    look: NotRequired[Look]
    controls: NotRequired[Controls]


class OutputRef(TypedDict):
    """The ``output_ref`` traitlet: this model's id and JupyterLab's id of the running cell."""

    model_id: str | None
    cell_id: str | None
    source: str | None  # the running cell's code (capped): finds the cell when a reload changed its id


# -- custom messages (docs/protocol.md section 2) -------------------------------------------------------
class StatePatch(TypedDict):
    """What changed since state ``base``: operations ``[path, value]`` (set) or ``[path]`` (delete), widget/publisher.py diff."""

    rev: int
    base: int
    ops: list[list[Any]]


class FullState(TypedDict):
    """A whole state (a ``snapshot``'s), at revision ``rev``."""

    rev: int
    full: State


class AppendMessage(TypedDict):
    """Kernel -> front end, with one buffer: a frame of new points (``replace``: series whose copy it replaces)."""

    kind: Literal["append"]
    seq: int
    replace: NotRequired[list[str]]
    state: NotRequired[StatePatch]


class StateMessage(TypedDict):
    """Kernel -> front end, no buffer: a state patch alone (no new points)."""

    kind: Literal["state"]
    state: StatePatch


class SnapshotMessage(TypedDict):
    """Kernel -> front end, with one buffer: a frame that replaces the store, and the whole state."""

    kind: Literal["snapshot"]
    seq: int
    state: FullState


class FinalMessage(TypedDict):
    """Kernel -> front end, no buffer: the static dashboard bundle for a page restored during the run."""

    kind: Literal["final"]
    data: dict[str, str]


class HelloMessage(TypedDict):
    """Front end -> kernel: sent once per model from ``initialize()``."""

    kind: Literal["hello"]


class ControlMessage(TypedDict):
    """Front end -> kernel: the Stop or Checkpoint button, for run ``run_id`` (obeyed only from this widget's comm)."""

    kind: Literal["control"]
    action: Literal["stop", "checkpoint"]
    run_id: str


KernelMessage = AppendMessage | StateMessage | SnapshotMessage | FinalMessage
FrontMessage = HelloMessage | ControlMessage


def apply(state: Any, ops: list[list[Any]]) -> Any:
    """``state`` with ``ops`` applied as js/src/statestore.ts does; the containers along each path are copied."""
    for op in ops:
        path = op[0]
        if not path:
            state = op[1]
            continue
        root = node = _copy(state)
        for key in path[:-1]:
            child = _copy(node[key])
            node[key] = child
            node = child
        if len(op) == 1:
            del node[path[-1]]
        else:
            node[path[-1]] = op[1]
        state = root
    return state


def _copy(node: Any) -> Any:
    return dict(node) if isinstance(node, dict) else list(node)


@dataclass(frozen=True, slots=True, kw_only=True)
class Frame:
    """A decoded frame: format version ``v`` (2), the message's ``seq`` and the series in wire order."""

    v: int
    seq: int
    series: tuple[SeriesColumns, ...]


def _read_header(data: memoryview) -> tuple[dict[str, Any], int]:
    if len(data) < _PREFIX.size:
        raise FrameError(f"frame too short: {len(data)} bytes")
    magic, header_len = _PREFIX.unpack_from(data, 0)
    if magic != FRAME_MAGIC:
        raise FrameError(f"bad magic {bytes(magic)!r}")
    end = _PREFIX.size + header_len
    if len(data) < end:
        raise FrameError("frame truncated inside its header")
    try:
        header = json.loads(bytes(data[_PREFIX.size : end]).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise FrameError(f"bad header: {exc}") from exc
    if not isinstance(header, dict) or header.get("v") != FRAME_VERSION:
        raise FrameError(f"unsupported frame header {header!r:.80}")
    return header, end + (-end % _ALIGN)  # the zero bytes after the header


def _read_column(data: memoryview, offset: int, n: int) -> array:
    column = array("d")
    column.frombytes(data[offset : offset + 8 * n])
    if not _LITTLE:
        column.byteswap()
    return column


def decode_frame(data: bytes | bytearray | memoryview) -> Frame:
    """Decode one v2 frame (columns as ``array("d")`` copies); ``FrameError`` for a bad magic, an unsupported version
    or a frame shorter than its header says."""
    view = memoryview(data).cast("B")
    header, offset = _read_header(view)
    series: list[SeriesColumns] = []
    for entry in header.get("series", []):
        n = int(entry["n"])
        axes = [str(a) for a in entry.get("axes") or [entry["x"]]]
        if n < 0 or offset + 8 * n * (len(axes) + 1) > len(view):
            raise FrameError(f"series {entry.get('name')!r}: data truncated")
        if entry["x"] not in X_KINDS or axes[0] != entry["x"] or not set(axes) <= set(X_MODES):
            raise FrameError(f"series {entry.get('name')!r}: unknown x kind {entry['x']!r} or axes {axes!r}")
        columns = [_read_column(view, offset + 8 * n * k, n) for k in range(len(axes) + 1)]  # the axes', then ys
        offset += 8 * n * len(columns)
        series.append(SeriesColumns(name=str(entry["name"]), x_kind=entry["x"], xs=columns[0], ys=columns[-1],
                                    mapped=dict(zip(axes[1:], columns[1:-1], strict=True))))
    return Frame(v=int(header["v"]), seq=int(header["seq"]), series=tuple(series))
