// @vitest-environment happy-dom
import { afterEach, describe, expect, it } from "vitest";
import { watchMounts } from "../src/mount";
import {
  addViewIfMissing,
  liveHostId,
  type NotebookLike,
  replaceViews,
  UNTRUSTED_NOTE,
  WIDGET_VIEW,
} from "../src/reattach";

type Output = { data?: Record<string, unknown> };

function untrustedNotebook(): { nb: NotebookLike; items: Output[] } {
  const items: Output[] = [];
  const outputs = {
    get length() {
      return items.length;
    },
    get: (i: number) => items[i] as Output,
    set: (i: number, value: Record<string, unknown>) => {
      items[i] = value as Output;
    },
    add: (value: Record<string, unknown>) => items.push(value as Output),
  };
  const cell = { id: "run", trusted: false, outputs };
  return { nb: { cells: { length: 1, get: () => cell as never } }, items };
}

/** JupyterLab's sanitizer strips data- attributes and renames an id to data-jupyter-id (JupyterLab 4.6). */
function renderSanitized(html: string): HTMLElement {
  const area = document.createElement("div");
  area.innerHTML = html;
  for (const el of area.querySelectorAll("*")) {
    const id = el.id;
    for (const name of el.getAttributeNames()) if (name !== "class") el.removeAttribute(name);
    if (id) el.setAttribute("data-jupyter-id", id);
  }
  document.body.append(area);
  return area;
}

const wait = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

describe("an untrusted reloaded cell", () => {
  afterEach(() => {
    document.body.replaceChildren();
  });

  it("gets an HTML copy that hosts the live view and says how to trust the notebook", async () => {
    const mounts: HTMLElement[] = [];
    const stop = watchMounts("k1", (host) => {
      host.textContent = "live";
      mounts.push(host);
      return () => {};
    });
    const { nb, items } = untrustedNotebook();
    expect(addViewIfMissing(nb, { model_id: "m1", cell_id: "run" }, "trainmeter: live dashboard", "k1")).toBe(
      true,
    );
    const html = items[0]?.data?.["text/html"] as string;
    expect(
      html.startsWith(`<div id="${liveHostId("k1")}">trainmeter: live dashboard (this notebook is not`),
    ).toBe(true);
    expect(UNTRUSTED_NOTE).toContain("File > Trust Notebook");
    expect(UNTRUSTED_NOTE).toContain("`jupyter trust NOTEBOOK.ipynb`");
    const area = renderSanitized(html); // the page draws the copy later, as JupyterLab renders an output
    await wait(100);
    expect(mounts).toHaveLength(1);
    expect(area.textContent).toContain("live");
    expect(items[0]?.data?.[WIDGET_VIEW]).toEqual({ model_id: "m1", version_major: 2, version_minor: 1 });
    expect(replaceViews(nb, "m1", { "text/html": "static" })).toBe(1); // the end: the static dashboard
    stop();
  });

  it("gets no HTML copy without a usable store key", () => {
    const { nb, items } = untrustedNotebook();
    expect(addViewIfMissing(nb, { model_id: "m1", cell_id: "run" }, "line", 'a"b')).toBe(true);
    expect(items[0]?.data?.["text/html"]).toBeUndefined();
  });
});
