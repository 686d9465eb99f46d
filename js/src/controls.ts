// The header's Stop and Checkpoint buttons, and the alerts' banner (docs/protocol.md, "Controls").
//
// A button acts on the live run through one of two paths the kernel chose (state.controls.path):
// "message": a `control` message on this widget's comm (ipykernel 7 answers it on a subshell
// while the cell trains); "file": `<run>/control.json` written through the Jupyter server's
// contents API (same origin, the page's own token), which the run's watchdog reads once a second.
// With neither, the buttons are disabled and say why. Stop asks for a second click to confirm.
// A fired alert shows a banner; one whose action is not "show" also prefixes the page title and
// raises a browser notification, so a user in another tab sees it.

import { type Component, h, setText } from "./dom";
import type { AlertEntry, ControlAction, ControlMessage, ControlsState, WidgetState } from "./protocol";
import { type PageConfig, readPageConfig, serverPath } from "./runlinks";

export const CONFIRM_MS = 5000;

/** Writes a control file; resolves to whether the server took it. */
export type FileWriter = (path: string, body: string) => Promise<boolean>;

function cookie(name: string): string | null {
  if (typeof document === "undefined") return null;
  const m = new RegExp(`(?:^|; )${name}=([^;]*)`).exec(document.cookie);
  return m?.[1] ? decodeURIComponent(m[1]) : null;
}

export function contentsWriter(config: PageConfig): FileWriter {
  return async (path, body) => {
    const headers: Record<string, string> = { "Content-Type": "application/json" };
    if (config.token) headers.Authorization = `token ${config.token}`;
    const xsrf = cookie("_xsrf");
    if (xsrf) headers["X-XSRFToken"] = xsrf;
    const url = `${config.baseUrl}api/contents/${path.split("/").map(encodeURIComponent).join("/")}`;
    try {
      const res = await fetch(url, {
        method: "PUT",
        headers,
        credentials: "same-origin",
        body: JSON.stringify({ type: "file", format: "text", content: body }),
      });
      return res.ok;
    } catch {
      return false;
    }
  };
}

export interface ControlsOptions {
  /** The widget's comm (`model.send`); absent in a static view. */
  send?: (msg: ControlMessage) => void;
  config?: PageConfig | null;
  writer?: FileWriter | null;
  pathname?: string;
  notify?: (alert: AlertEntry) => void;
}

/** Tell the page: its title until it is focused again, and a browser notification where allowed. */
export function notifyPage(alert: AlertEntry): void {
  try {
    if (typeof document !== "undefined" && !document.title.startsWith("⚠")) {
      const title = document.title;
      document.title = `⚠ ${alert.rule} · ${title}`;
      window.addEventListener("focus", () => (document.title = title), { once: true });
    }
    const N = (globalThis as { Notification?: typeof Notification }).Notification;
    if (!N) return;
    const show = (): void => void new N("trainmeter alert", { body: alert.sentence });
    if (N.permission === "granted") show();
    else if (N.permission === "default") void N.requestPermission().then((p) => p === "granted" && show());
  } catch {
    // a page that refuses notifications still has the banner
  }
}

export interface ControlsComponent extends Component {
  /** The alerts' banner, placed by the view under the header. */
  banner: HTMLElement;
}

export function buildControls(options: ControlsOptions = {}): ControlsComponent {
  const config = options.config === undefined ? readPageConfig() : options.config;
  const writer = options.writer === undefined ? (config ? contentsWriter(config) : null) : options.writer;
  const pathname = options.pathname ?? (typeof location === "undefined" ? "" : location.pathname);
  const notify = options.notify ?? notifyPage;
  const el = h("span", "tm-controls");
  el.dataset.tm = "controls";
  const stop = h("button", "tm-control", "Stop") as HTMLButtonElement;
  stop.type = "button";
  stop.dataset.tm = "control-stop";
  const checkpoint = h("button", "tm-control", "Checkpoint") as HTMLButtonElement;
  checkpoint.type = "button";
  checkpoint.dataset.tm = "control-checkpoint";
  const note = h("span", "tm-control-note");
  note.dataset.tm = "control-note";
  el.append(stop, checkpoint, note);
  const banner = h("div", "tm-alerts");
  banner.dataset.tm = "alerts";
  banner.setAttribute("role", "alert");
  banner.hidden = true;

  let state: ControlsState | null = null;
  let runPath: string | null = null;
  let confirmUntil = 0;
  let sent = 0;
  const told = new Set<string>();
  let said = "";

  const filePath = (): string | null => {
    if (!config || !runPath) return null;
    return `${runPath}/control.json`;
  };
  const act = (action: ControlAction): void => {
    const c = state;
    if (!c?.live || !c.run_id) return;
    if (c.path === "message" && options.send) {
      options.send({ kind: "control", action, run_id: c.run_id });
      said = action === "stop" ? "stop asked: after this step" : "checkpoint asked: at the next step";
    } else {
      const path = filePath();
      if (!writer || !path) return;
      sent += 1;
      const body = JSON.stringify({ run_id: c.run_id, action, id: `${Date.now()}-${sent}` });
      said = `${action} asked through the control file…`;
      void writer(path, body).then((ok) => {
        said = ok
          ? `${action} asked: the run reads its control file within a second`
          : "the control file was not written";
        setText(note, said);
      });
    }
    setText(note, said);
  };
  stop.addEventListener("click", () => {
    if (stop.disabled) return;
    const now = Date.now();
    if (now > confirmUntil) {
      confirmUntil = now + CONFIRM_MS;
      setText(stop, "Confirm stop");
      stop.dataset.confirm = "true";
      setTimeout(() => {
        if (Date.now() >= confirmUntil) {
          setText(stop, "Stop");
          delete stop.dataset.confirm;
        }
      }, CONFIRM_MS + 50);
      return;
    }
    confirmUntil = 0;
    setText(stop, "Stop");
    delete stop.dataset.confirm;
    act("stop");
  });
  checkpoint.addEventListener("click", () => {
    if (!checkpoint.disabled) act("checkpoint");
  });

  const renderAlerts = (alerts: AlertEntry[]): void => {
    banner.hidden = alerts.length === 0;
    const key = JSON.stringify(alerts.map((a) => a.rule));
    if (banner.dataset.key !== key) {
      banner.dataset.key = key;
      banner.replaceChildren(
        ...alerts.map((a) => {
          const row = h("div", "tm-alert", a.sentence);
          row.dataset.rule = a.rule;
          return row;
        }),
      );
    }
    for (const a of alerts) {
      if (a.notify && !told.has(a.rule)) {
        told.add(a.rule);
        notify(a);
      }
    }
  };

  return {
    el,
    banner,
    update(s: WidgetState) {
      const c = s.controls ?? null;
      state = c;
      runPath = config ? serverPath(s.run_rel, pathname) : null;
      renderAlerts(c?.alerts ?? []);
      const done = !!c && !c.live && (c.stopped != null || c.checkpoints.length > 0);
      el.hidden = !c?.live && !done;
      stop.hidden = checkpoint.hidden = !c?.live;
      if (!c?.live) {
        // the finished run: who stopped it, and its last checkpoint
        const last = c?.checkpoints[c.checkpoints.length - 1];
        const parts = [
          c?.stopped ? `stopped by ${c.stopped.by} after step ${c.stopped.step}` : "",
          last ? `checkpoint saved: ${last.path}` : "",
        ];
        setText(note, parts.filter(Boolean).join(" · "));
        return;
      }
      const fileOk = c.path === "file" && !!writer && !!filePath();
      const messageOk = c.path === "message" && !!options.send;
      const why = messageOk || fileOk ? null : (c.reason ?? "the run cannot be reached from this page");
      for (const b of [stop, checkpoint]) {
        b.disabled = why != null;
        b.title =
          why ?? (fileOk ? "through the run's control file (the contents API)" : "through the widget's comm");
      }
      stop.title = why ?? "stop after the current optimizer step (click twice to confirm)";
      const pending = c.pending.stop
        ? `stopping after this step (${c.pending.stop})`
        : c.pending.checkpoint
          ? `checkpoint at the next step (${c.pending.checkpoint})`
          : "";
      const last = c.checkpoints[c.checkpoints.length - 1];
      const refused = c.refused[c.refused.length - 1];
      const text =
        why ??
        (pending ||
          (refused && (!last || refused.step >= last.step)
            ? `checkpoint refused: ${refused.reason}`
            : last
              ? `checkpoint saved: ${last.path}`
              : said));
      setText(note, text);
      note.dataset.disabled = why ? "true" : "false";
    },
  };
}
