// @vitest-environment happy-dom
import { describe, expect, it } from "vitest";
import type { WidgetState } from "../src/protocol";
import {
  buildRunLinks,
  HIDDEN_HINT,
  notebookPath,
  type PageConfig,
  readPageConfig,
  serverPath,
} from "../src/runlinks";

const LAB: PageConfig = { baseUrl: "/base/", token: null };
const LAB_NB = "/base/lab/tree/proj/nb.ipynb"; // JupyterLab's URL names the notebook shown

function state(over: Partial<WidgetState> = {}): WidgetState {
  return {
    name: "r",
    status: "completed",
    run_dir: "runs/20260101T000000Z-r",
    run_rel: "runs/20260101T000000Z-r",
    ...over,
  };
}

const tick = () => new Promise((r) => setTimeout(r, 0));

describe("server paths", () => {
  it("reads the notebook's path from JupyterLab's and Notebook 7's URLs, else null", () => {
    expect(notebookPath("/base/lab/tree/proj/my%20nb.ipynb")).toBe("proj/my nb.ipynb");
    expect(notebookPath("/lab/workspaces/auto-x/tree/nb.ipynb")).toBe("nb.ipynb");
    expect(notebookPath("/doc/tree/a/nb.ipynb")).toBe("a/nb.ipynb");
    expect(notebookPath("/base/notebooks/proj/sub/nb.ipynb")).toBe("proj/sub/nb.ipynb");
    expect(notebookPath("/base/lab")).toBeNull();
    expect(notebookPath("/lab/tree/%E0%A4%A")).toBeNull(); // a malformed escape
  });

  it("joins the run's path relative to the notebook to the notebook's folder; none outside it", () => {
    expect(serverPath("runs/a", "/base/notebooks/proj/sub/nb.ipynb")).toBe("proj/sub/runs/a");
    expect(serverPath("runs/a", "/lab/tree/nb.ipynb")).toBe("runs/a");
    expect(serverPath("runs\\a", "/lab/tree/p/nb.ipynb")).toBe("p/runs/a");
    expect(serverPath("../runs/a", "/base/notebooks/proj/nb.ipynb")).toBeNull();
    expect(serverPath(null, "/base/notebooks/proj/nb.ipynb")).toBeNull();
    expect(serverPath("runs/a", "/base/lab")).toBeNull(); // the URL names no notebook
  });

  it("reads the page config's base URL", () => {
    const el = document.createElement("script");
    el.id = "jupyter-config-data";
    el.textContent = JSON.stringify({ baseUrl: "/b", serverRoot: "/srv" });
    document.body.append(el);
    expect(readPageConfig()).toEqual({ baseUrl: "/b/", token: null });
    el.remove();
    expect(readPageConfig()).toBeNull();
  });
});

describe("header links", () => {
  it("links the folder and, once finished, passport.md when the server serves them", async () => {
    const asked: string[] = [];
    const links = buildRunLinks(
      LAB,
      async (p) => {
        asked.push(p);
        return true;
      },
      LAB_NB,
    );
    links.update(state());
    await tick();
    const folder = links.el.querySelector('[data-tm="run-folder-link"]') as HTMLAnchorElement;
    const passport = links.el.querySelector('[data-tm="passport-link"]') as HTMLAnchorElement;
    expect(folder.getAttribute("href")).toBe("/base/lab/tree/proj/runs/20260101T000000Z-r");
    expect(passport.getAttribute("href")).toBe("/base/lab/tree/proj/runs/20260101T000000Z-r/passport.md");
    expect(passport.target).toBe("_blank");
    expect(asked).toEqual(["proj/runs/20260101T000000Z-r", "proj/runs/20260101T000000Z-r/passport.md"]);
  });

  it("has no passport link while the run is live", async () => {
    const links = buildRunLinks(LAB, async () => true, LAB_NB);
    links.update(state({ status: "running" }));
    await tick();
    expect(links.el.querySelector('[data-tm="run-folder-link"]')).not.toBeNull();
    expect(links.el.querySelector('[data-tm="passport-link"]')).toBeNull();
  });

  it("shows a hidden folder as text with what would make it a link, never asking the server (a 404)", async () => {
    const asked: string[] = [];
    const links = buildRunLinks(
      LAB,
      async (p) => {
        asked.push(p);
        return false;
      },
      LAB_NB,
    );
    const hidden = ".trainmeter/runs/20260101T000000Z-r";
    links.update(state({ run_dir: hidden, run_rel: hidden }));
    await tick();
    expect(links.el.querySelector("a")).toBeNull();
    expect(links.el.textContent).toContain(".trainmeter/runs/20260101T000000Z-r");
    const hint = links.el.querySelector('[data-tm="runlinks-hint"]') as HTMLDetailsElement;
    expect(hint.textContent).toContain(HIDDEN_HINT);
    // one short line on the first screen: the reason is folded, said once
    expect(hint.tagName).toBe("DETAILS");
    expect(hint.open).toBe(false);
    expect(hint.querySelector("summary")?.textContent).toBe("not a link: why");
    expect(links.el.textContent?.split(HIDDEN_HINT)).toHaveLength(2);
    links.update(state({ run_dir: hidden, run_rel: hidden, status: "completed" }));
    await tick();
    expect(asked).toEqual([]);
  });

  it("is plain text outside Jupyter's pages (no page config: VS Code, Colab)", () => {
    const links = buildRunLinks(null, null, "");
    links.update(state());
    expect(links.el.querySelector("a")).toBeNull();
    expect(links.el.querySelector("code")?.textContent).toBe("runs/20260101T000000Z-r");
  });

  it("uses Notebook 7's own routes there", async () => {
    const links = buildRunLinks(LAB, async () => true, "/base/notebooks/proj/nb.ipynb");
    links.update(state());
    await tick();
    expect(links.el.querySelector('[data-tm="run-folder-link"]')?.getAttribute("href")).toBe(
      "/base/tree/proj/runs/20260101T000000Z-r",
    );
    expect(links.el.querySelector('[data-tm="passport-link"]')?.getAttribute("href")).toBe(
      "/base/edit/proj/runs/20260101T000000Z-r/passport.md",
    );
  });
});
