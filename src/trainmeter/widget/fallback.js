// The view when the dashboard bundle (static/widget.js) is missing: status, step and the text line (widget/widget.py).
function render({ model, el }) {
  const root = document.createElement("div");
  root.className = "trainmeter trainmeter-fallback";
  const head = document.createElement("div");
  const status = document.createElement("span");
  status.dataset.tm = "status";
  const step = document.createElement("span");
  step.dataset.tm = "step";
  head.append("step ", step, " \u00b7 ", status);
  const line = document.createElement("pre");
  const note = document.createElement("div");
  note.textContent = "trainmeter: the dashboard bundle (static/widget.js) is missing from this install; " +
    "build it with `npm --prefix js ci && npm --prefix js run build`, or reinstall trainmeter.";
  root.append(head, line, note);
  el.append(root);
  let state = model.get("state") || {};
  const update = () => {
    const s = state;
    status.textContent = s.status || "";
    const tile = (s.tiles || []).find((t) => t.id === "step");
    step.textContent = tile && tile.value != null ? String(tile.value) : "";
    line.textContent = s.text_line || "";
  };
  const onState = () => { state = model.get("state") || {}; update(); };
  const onMessage = (msg) => {  // the live run's patches (docs/protocol.md section 2), applied in place
    const p = msg && msg.state;
    if (p && p.full) state = p.full;
    else if (p && p.ops && p.base === state.rev) {
      for (const [path, ...value] of p.ops) {
        if (!path.length) { state = value[0]; continue; }
        let node = state;
        for (const key of path.slice(0, -1)) node = node[key];
        if (value.length) node[path[path.length - 1]] = value[0]; else delete node[path[path.length - 1]];
      }
      state.rev = p.rev;
    }
    update();
  };
  update();
  model.on("change:state", onState);
  model.on("msg:custom", onMessage);
  return () => { model.off("change:state", onState); model.off("msg:custom", onMessage); };
}
export default { render };
