// The header's links to the run folder and its passport.md.
//
// A link is drawn only where it works: inside JupyterLab or Notebook 7 (their page
// config names the server's base URL, their URL the notebook's path: `lab/tree/<path>`,
// `notebooks/<path>`), for a run under the notebook's folder (the state's `run_rel`: no
// absolute path is sent, so none is saved), after the server's contents API has
// answered that it serves the path. Jupyter
// refuses hidden paths by default (`.trainmeter/`): then the path is shown as text
// with what would make it a link. A link opens a new browser tab on the app's own
// URL for the path (JupyterLab: `lab/tree/<path>`; Notebook 7: `tree/` for the folder,
// `edit/` for passport.md). Not JupyterLab's command linker: since 4.5 it asks
// "Run Command?" for a link outside a trusted boundary, which an output is not.
// Elsewhere (VS Code, Colab, no page config) the path is plain text.

import { type Component, h } from "./dom";
import type { WidgetState } from "./protocol";

export interface PageConfig {
  baseUrl: string;
  token: string | null;
}

/** The Jupyter page config (`#jupyter-config-data`), or null outside Jupyter's own pages. */
export function readPageConfig(doc: Document = document): PageConfig | null {
  const el = doc.getElementById("jupyter-config-data");
  if (!el?.textContent) return null;
  try {
    const data = JSON.parse(el.textContent) as Record<string, unknown>;
    const baseUrl = typeof data.baseUrl === "string" ? data.baseUrl : "/";
    const token = typeof data.token === "string" && data.token ? data.token : null;
    return { baseUrl: baseUrl.endsWith("/") ? baseUrl : `${baseUrl}/`, token };
  } catch {
    return null;
  }
}

/** The notebook's path on the server, from the page's URL (JupyterLab's `lab/tree/<path>`, with or without
 * `workspaces/<name>/`, and `doc/tree/<path>`; Notebook 7's `notebooks/<path>`), or null (`/lab`, VS Code). */
export function notebookPath(pathname: string): string | null {
  const m = /\/(?:(?:lab|doc)(?:\/workspaces\/[^/]+)?\/tree|notebooks)\/(.+)$/.exec(pathname);
  try {
    return m?.[1] ? decodeURIComponent(m[1]) : null;
  } catch {
    return null; // a malformed escape: no link
  }
}

/**
 * The run folder's path on the server, or null: `runRel` (relative to the kernel's folder,
 * which is the notebook's) joined to the notebook's folder named by the page's URL. A run
 * outside the notebook's folder (no `runRel`) has none.
 */
export function serverPath(runRel: string | null | undefined, pathname = ""): string | null {
  const nb = notebookPath(pathname);
  if (!runRel || nb == null || runRel.startsWith("..") || runRel.startsWith("/")) return null;
  const parts = nb.split("/").slice(0, -1);
  return [...parts, ...runRel.replace(/\\/g, "/").split("/")].filter((p) => p && p !== ".").join("/") || null;
}

export function isHidden(path: string): boolean {
  return path.split("/").some((part) => part.startsWith(".") && part !== "." && part !== "..");
}

function encodePath(path: string): string {
  return path.split("/").map(encodeURIComponent).join("/");
}

export const HIDDEN_HINT = "Jupyter does not serve hidden folders by default: run with --dir runs";

type Probe = "ok" | "refused" | "pending";

/** Whether the server serves `path` (a GET of its contents model, no content). */
export type Prober = (path: string) => Promise<boolean>;

export function contentsProber(config: PageConfig): Prober {
  return async (path) => {
    const headers: Record<string, string> = {};
    if (config.token) headers.Authorization = `token ${config.token}`;
    try {
      const res = await fetch(`${config.baseUrl}api/contents/${encodePath(path)}?content=0`, {
        headers,
        credentials: "same-origin",
      });
      return res.ok;
    } catch {
      return false;
    }
  };
}

export function buildRunLinks(
  config: PageConfig | null = readPageConfig(),
  prober: Prober | null = config ? contentsProber(config) : null,
  pathname: string = typeof location === "undefined" ? "" : location.pathname,
): Component {
  const el = h("div", "tm-runlinks");
  el.dataset.tm = "runlinks";
  const probes = new Map<string, Probe>();
  let last = "";
  let lastState: WidgetState | null = null;

  const probe = (path: string): Probe => {
    const known = probes.get(path);
    if (known) return known;
    probes.set(path, "pending");
    if (!prober) return "pending";
    void prober(path).then((ok) => {
      probes.set(path, ok ? "ok" : "refused");
      if (lastState) render(lastState, true);
    });
    return "pending";
  };

  const notebook7 = /\/notebooks\//.test(pathname);
  const link = (text: string, path: string, kind: "folder" | "file"): HTMLAnchorElement => {
    const a = h("a", "tm-runlink", text) as HTMLAnchorElement;
    const base = config?.baseUrl ?? "/";
    const route = notebook7 ? (kind === "folder" ? "tree/" : "edit/") : "lab/tree/";
    a.href = `${base}${route}${encodePath(path)}`;
    a.target = "_blank";
    a.rel = "noopener";
    a.title = `open ${path} in a new tab`;
    a.dataset.tm = kind === "folder" ? "run-folder-link" : "passport-link";
    return a;
  };

  const render = (state: WidgetState, force = false): void => {
    lastState = state;
    const runDir = state.run_rel ?? state.run_dir ?? null; // shown relative to the notebook's folder
    el.hidden = !runDir;
    if (!runDir) return;
    const finished = !["starting", "running"].includes(state.status ?? "");
    const path = config ? serverPath(state.run_rel, pathname) : null;
    // a hidden folder is not asked for: Jupyter refuses it by default, and each refusal is a 404 in the console
    const asked = path && !isHidden(path) ? path : null;
    const folderState = asked ? probe(asked) : "refused";
    const passport = asked && finished ? `${asked}/passport.md` : null;
    const passportState = passport ? probe(passport) : "refused";
    const key = JSON.stringify([runDir, path, folderState, passportState, finished]);
    if (key === last && !force) return;
    last = key;
    const parts: Node[] = [document.createTextNode("run folder ")];
    if (path && folderState === "ok" && config) {
      parts.push(link(runDir, path, "folder"));
    } else {
      const code = h("code", "tm-mono", runDir);
      code.title = runDir;
      parts.push(code);
    }
    if (passport && passportState === "ok" && config) {
      parts.push(document.createTextNode(" · "), link("passport.md", passport, "file"));
    } else if (finished) {
      parts.push(document.createTextNode(" · passport.md"));
    }
    if (path && folderState === "refused" && isHidden(path)) {
      // one short line on the first screen; what would make it a link, once, when opened
      const hint = document.createElement("details");
      hint.className = "tm-runlinks-hint";
      hint.dataset.tm = "runlinks-hint";
      const summary = document.createElement("summary");
      summary.textContent = "not a link: why";
      hint.append(summary, h("span", "", HIDDEN_HINT));
      parts.push(document.createTextNode(" "), hint);
    }
    el.replaceChildren(...parts);
  };

  return {
    el,
    update(state) {
      render(state);
    },
  };
}
