// @vitest-environment happy-dom
import { describe, expect, it } from "vitest";
import type { WidgetState } from "../src/protocol";
import { buildRunLinks, HIDDEN_HINT, type PageConfig, readPageConfig, serverPath } from "../src/runlinks";

const LAB: PageConfig = { baseUrl: "/base/", serverRoot: "/home/me/work", token: null };

function state(over: Partial<WidgetState> = {}): WidgetState {
  return {
    name: "r",
    status: "completed",
    run_dir: "runs/20260101T000000Z-r",
    run_path: "/home/me/work/proj/runs/20260101T000000Z-r",
    run_rel: "runs/20260101T000000Z-r",
    ...over,
  };
}

const tick = () => new Promise((r) => setTimeout(r, 0));

describe("server paths", () => {
  it("is the run folder under the server root, else null", () => {
    expect(serverPath("/home/me/work/proj/runs/x", null, LAB)).toBe("proj/runs/x");
    expect(serverPath("/elsewhere/runs/x", null, LAB)).toBeNull();
    expect(serverPath("C:\\work\\runs\\x", null, { ...LAB, serverRoot: "C:/work" })).toBe("runs/x");
  });

  it("joins the notebook's folder from Notebook 7's URL when there is no server root", () => {
    const nb7 = { ...LAB, serverRoot: null };
    expect(serverPath("/x/runs/a", "runs/a", nb7, "/base/notebooks/proj/sub/nb.ipynb")).toBe(
      "proj/sub/runs/a",
    );
    expect(serverPath("/x/runs/a", "../runs/a", nb7, "/base/notebooks/proj/nb.ipynb")).toBeNull();
  });

  it("reads the page config's base URL and root", () => {
    const el = document.createElement("script");
    el.id = "jupyter-config-data";
    el.textContent = JSON.stringify({ baseUrl: "/b", serverRoot: "/srv" });
    document.body.append(el);
    expect(readPageConfig()).toEqual({ baseUrl: "/b/", serverRoot: "/srv", token: null });
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
      "/base/lab",
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
    const links = buildRunLinks(LAB, async () => true, "/base/lab");
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
      "/base/lab",
    );
    const hidden = "/home/me/work/.trainmeter/runs/20260101T000000Z-r";
    links.update(
      state({ run_dir: hidden, run_rel: ".trainmeter/runs/20260101T000000Z-r", run_path: hidden }),
    );
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
    links.update(state({ run_dir: hidden, run_path: hidden, status: "completed" }));
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
    const links = buildRunLinks(
      { ...LAB, serverRoot: null },
      async () => true,
      "/base/notebooks/proj/nb.ipynb",
    );
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
