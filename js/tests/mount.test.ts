// @vitest-environment happy-dom
import { afterEach, describe, expect, it } from "vitest";
import { mountSelector, watchMounts } from "../src/mount";

const wait = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

function snapshot(key: string): HTMLElement {
  const el = document.createElement("div");
  el.className = "trainmeter-snapshot";
  el.dataset.tmMount = key;
  el.textContent = "static";
  document.body.append(el);
  return el;
}

describe("watchMounts", () => {
  afterEach(() => {
    document.body.replaceChildren();
  });

  it("draws a live view before the static copy and hides it, also for copies added later", async () => {
    const first = snapshot("k1");
    snapshot("other");
    const mounts: HTMLElement[] = [];
    const stop = watchMounts("k1", (host) => {
      host.textContent = "live";
      mounts.push(host);
      return () => {};
    });
    expect(mounts).toHaveLength(1);
    expect(first.previousElementSibling?.textContent).toBe("live");
    expect(first.style.display).toBe("none");
    const second = snapshot("k1");
    await wait(150);
    expect(mounts).toHaveLength(2);
    expect(second.style.display).toBe("none");
    stop();
  });

  it("replaces a static copy in the mutation's own microtask, before the page can paint it", async () => {
    const mounts: HTMLElement[] = [];
    const stop = watchMounts("k2", (host) => {
      mounts.push(host);
      return () => {};
    });
    const wrapper = document.createElement("div");
    wrapper.append(snapshot("k2"));
    document.body.append(wrapper); // as a host renders an output: the copy inside a new node
    await Promise.resolve(); // MutationObserver callbacks run as microtasks; no timer has fired
    await Promise.resolve();
    expect(mounts).toHaveLength(1);
    expect((wrapper.querySelector("[data-tm-mount]") as HTMLElement).style.display).toBe("none");
    stop();
  });

  it("destroys a live view whose static copy left the page, and restores the copies when stopped", async () => {
    const a = snapshot("k2");
    const b = snapshot("k2");
    let cleaned = 0;
    const stop = watchMounts("k2", () => () => {
      cleaned += 1;
    });
    a.remove();
    await wait(150);
    expect(cleaned).toBe(1);
    expect(document.querySelectorAll(".tm-mount")).toHaveLength(1);
    stop();
    expect(cleaned).toBe(2);
    expect(b.style.display).toBe("");
    expect(document.querySelectorAll(".tm-mount")).toHaveLength(0);
  });

  it("ignores keys that are not plain ids", () => {
    expect(mountSelector('x"] body [a="')).toBeNull();
    expect(watchMounts(undefined, () => () => {})).toBeTypeOf("function");
  });
});
