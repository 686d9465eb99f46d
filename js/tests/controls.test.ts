// @vitest-environment happy-dom
import { describe, expect, it } from "vitest";
import { buildControls, CONFIRM_MS } from "../src/controls";
import type { AlertEntry, ControlMessage, ControlsState, WidgetState } from "../src/protocol";
import type { PageConfig } from "../src/runlinks";

const LAB: PageConfig = { baseUrl: "/base/", token: "t" };

function controls(over: Partial<ControlsState> = {}): ControlsState {
  return {
    run_id: "20260101T000000Z-r",
    live: true,
    path: "message",
    reason: null,
    control_file: null,
    pending: { stop: null, checkpoint: null },
    stopped: null,
    checkpoints: [],
    refused: [],
    alerts: [],
    ...over,
  };
}

function state(c: ControlsState | null): WidgetState {
  return {
    name: "r",
    status: "running",
    run_rel: "runs/20260101T000000Z-r",
    controls: c,
  };
}

const button = (el: HTMLElement, which: string) =>
  el.querySelector(`[data-tm="control-${which}"]`) as HTMLButtonElement;

describe("the header's controls", () => {
  it("sends stop only on a confirming second click, and checkpoint at once, naming the run", () => {
    const sent: ControlMessage[] = [];
    const c = buildControls({ send: (m) => sent.push(m), config: null, writer: null });
    c.update(state(controls()));
    button(c.el, "stop").click();
    expect(sent).toEqual([]);
    expect(button(c.el, "stop").textContent).toBe("Confirm stop");
    button(c.el, "stop").click();
    button(c.el, "checkpoint").click();
    expect(sent).toEqual([
      { kind: "control", action: "stop", run_id: "20260101T000000Z-r" },
      { kind: "control", action: "checkpoint", run_id: "20260101T000000Z-r" },
    ]);
    expect(CONFIRM_MS).toBeGreaterThan(1000);
  });

  it("is disabled with the kernel's reason where neither path reaches the run", () => {
    const sent: ControlMessage[] = [];
    const c = buildControls({ send: (m) => sent.push(m), config: null, writer: null });
    c.update(state(controls({ path: null, reason: "marimo reads widget messages only between cells" })));
    expect(button(c.el, "stop").disabled).toBe(true);
    expect(button(c.el, "checkpoint").title).toContain("marimo");
    expect(c.el.querySelector('[data-tm="control-note"]')?.textContent).toContain("marimo");
    button(c.el, "checkpoint").click();
    expect(sent).toEqual([]);
  });

  it("writes the run's control file through the contents API on the file path", async () => {
    const writes: [string, string][] = [];
    const c = buildControls({
      config: LAB,
      writer: async (path, body) => {
        writes.push([path, body]);
        return true;
      },
      pathname: "/base/lab/tree/nb.ipynb",
    });
    c.update(state(controls({ path: "file", control_file: "runs/20260101T000000Z-r/control.json" })));
    button(c.el, "checkpoint").click();
    await new Promise((r) => setTimeout(r, 0));
    expect(writes[0]?.[0]).toBe("runs/20260101T000000Z-r/control.json");
    const body = JSON.parse(writes[0]?.[1] ?? "{}");
    expect(body.run_id).toBe("20260101T000000Z-r");
    expect(body.action).toBe("checkpoint");
    expect(typeof body.id).toBe("string");
  });

  it("lists the last checkpoint, and once the run ended says who stopped it without buttons", () => {
    const c = buildControls({ send: () => {}, config: null, writer: null });
    c.update(state(controls({ live: false })));
    expect(c.el.hidden).toBe(true);
    const ckpt = { path: "checkpoints/step-8.pt", step: 8, bytes: 10, seconds: 0.1, source: "trainmeter" };
    c.update(state(controls({ checkpoints: [ckpt] })));
    expect(c.el.hidden).toBe(false);
    const note = () => c.el.querySelector('[data-tm="control-note"]')?.textContent;
    expect(note()).toBe("checkpoint saved: checkpoints/step-8.pt");
    c.update(state(controls({ live: false, checkpoints: [ckpt], stopped: { by: "button", step: 9 } })));
    expect(c.el.hidden).toBe(false);
    expect(button(c.el, "stop").hidden && button(c.el, "checkpoint").hidden).toBe(true);
    expect(note()).toBe("stopped by button after step 9 · checkpoint saved: checkpoints/step-8.pt");
  });

  it("shows each alert in the banner and notifies once for those that ask", () => {
    const told: AlertEntry[] = [];
    const c = buildControls({ send: () => {}, config: null, writer: null, notify: (a) => told.push(a) });
    const nan = {
      rule: "nan:stop",
      action: "stop",
      step: 300,
      sentence: "alert nan:stop: the loss was nan",
      notify: true,
    };
    const spike = {
      rule: "spike:show",
      action: "show",
      step: 9,
      sentence: "alert spike:show: jump",
      notify: false,
    };
    c.update(state(controls({ alerts: [spike] })));
    expect(c.banner.hidden).toBe(false);
    c.update(state(controls({ alerts: [spike, nan] })));
    c.update(state(controls({ alerts: [spike, nan] })));
    expect(c.banner.textContent).toContain("the loss was nan");
    expect(told.map((a) => a.rule)).toEqual(["nan:stop"]);
  });
});
