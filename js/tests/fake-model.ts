import type { Traits } from "../src/protocol";

type Handler = (...args: unknown[]) => void;

/** A stand-in for anywidget's model: get/set/on/off/send, with helpers to emit events. */
export class FakeModel {
  readonly sent: unknown[] = [];
  private readonly handlers = new Map<string, Set<Handler>>();

  constructor(private readonly traits: Partial<Traits> = {}) {}

  get<K extends keyof Traits>(key: K): Traits[K] {
    return (this.traits[key] ?? null) as Traits[K];
  }

  set<K extends keyof Traits>(key: K, value: Traits[K]): void {
    this.traits[key] = value;
    this.emit(`change:${String(key)}`);
  }

  on(event: string, cb: Handler): void {
    let set = this.handlers.get(event);
    if (!set) {
      set = new Set();
      this.handlers.set(event, set);
    }
    set.add(cb);
  }

  off(event?: string | null, cb?: Handler | null): void {
    if (!event) {
      this.handlers.clear();
      return;
    }
    if (!cb) this.handlers.delete(event);
    else this.handlers.get(event)?.delete(cb);
  }

  send(content: unknown): void {
    this.sent.push(content);
  }

  emit(event: string, ...args: unknown[]): void {
    for (const cb of [...(this.handlers.get(event) ?? [])]) cb(...args);
  }

  listenerCount(event: string): number {
    return this.handlers.get(event)?.size ?? 0;
  }
}
