// Live dashboards in place of the static HTML. At the end of a run (and for every
// tm.display) the kernel shows a static dashboard, not a widget view, so a saved
// notebook reads anywhere without "model not found". Its root carries
// data-tm-mount="<store_key>"; while the model lives, this draws the interactive
// dashboard before it and hides the static copy. When the static element leaves
// the page the live view is destroyed; when the model goes, the static copy returns.

export type MountFn = (host: HTMLElement) => () => void;

interface Mounted {
  anchor: HTMLElement;
  host: HTMLElement;
  cleanup: () => void;
}

const SCAN_DELAY_MS = 60;

/** Only word characters and dashes: the key goes into an attribute selector. */
export function mountSelector(key: string): string | null {
  return /^[\w-]+$/.test(key) ? `[data-tm-mount="${key}"]` : null;
}

/**
 * Mount a live view (via `mount`) before every element marked with `key`, now and
 * as they appear. Returns a function that unmounts all and shows the static copies.
 */
export function watchMounts(key: unknown, mount: MountFn, doc: Document = document): () => void {
  const selector = typeof key === "string" ? mountSelector(key) : null;
  if (!selector || !doc.body) return () => {};
  const mounted: Mounted[] = [];
  let timer: ReturnType<typeof setTimeout> | null = null;

  const scan = (): void => {
    timer = null;
    for (let i = mounted.length - 1; i >= 0; i--) {
      const m = mounted[i] as Mounted;
      if (!m.anchor.isConnected) {
        safely(m.cleanup);
        m.host.remove();
        mounted.splice(i, 1);
      }
    }
    for (const anchor of doc.querySelectorAll<HTMLElement>(selector)) {
      if (mounted.some((m) => m.anchor === anchor)) continue;
      const host = doc.createElement("div");
      host.className = "tm-mount";
      anchor.before(host);
      let cleanup: () => void;
      try {
        cleanup = mount(host);
      } catch (err) {
        console.warn("trainmeter: live view not mounted", err);
        host.remove();
        continue;
      }
      anchor.style.display = "none";
      mounted.push({ anchor, host, cleanup });
    }
  };
  const schedule = (): void => {
    if (timer === null) timer = setTimeout(scan, SCAN_DELAY_MS);
  };
  // a static copy just added is replaced before the page paints it (no collapse to its height and back)
  const onMutations = (records: MutationRecord[]): void => {
    if (records.some((r) => [...r.addedNodes].some((n) => holds(n, selector)))) {
      if (timer !== null) clearTimeout(timer);
      scan();
    } else schedule();
  };
  const observer = typeof MutationObserver === "undefined" ? null : new MutationObserver(onMutations);
  observer?.observe(doc.body, { childList: true, subtree: true });
  scan();
  return () => {
    observer?.disconnect();
    if (timer !== null) clearTimeout(timer);
    for (const m of mounted.splice(0)) {
      safely(m.cleanup);
      m.host.remove();
      m.anchor.style.display = "";
    }
  };
}

function holds(node: Node, selector: string): boolean {
  if (!(node instanceof Element)) return false;
  return node.matches(selector) || node.querySelector(selector) !== null;
}

function safely(fn: () => void): void {
  try {
    fn();
  } catch (err) {
    console.warn("trainmeter: unmount failed", err);
  }
}
