// JSON-RPC 2.0 over the page's WebSocket to /rpc: calls, and
// subscriptions whose notifications are handed to a callback. The same
// methods as kdd's socket (docs/api.md).
//
// The connection comes back by itself when it drops (kdd restarted, the
// network went away, a laptop slept): it tries again after 0.5 s, 1 s,
// 2 s… up to 8 s (and at once when the browser says it is online again),
// tells `onState` where it stands, and makes every subscription again —
// a thread's with `since_seq` after the last message it handed on, so no
// message is lost or shown twice. A call in flight when it drops fails
// (it is not sent again: kdd may have done it); a call made while it is
// down waits for it to come back.

const MAX_BACKOFF_MS = 8000;
// A connection that does not answer a ping call in this long is dropped
// and made again (a network gone silently keeps a socket open for long).
const PING_EVERY_MS = 20000;
const PING_PATIENCE_MS = 10000;

export class Rpc {
  // `onState(state, text)`: state is connecting, connected, reconnecting
  // or unpaired; text says it to a person.
  constructor(onState) {
    this.nextId = 1;
    this.pending = new Map();
    this.subs = new Set();
    this.byId = new Map();
    this.onState = onState;
    this.open = false;
    this.waiters = [];
    this.attempt = 0;
    this.connections = 0;
    this.timer = null;
    this.state('connecting', 'connecting…');
    this.connect();
    window.addEventListener('online', () => { if (!this.open) this.retryNow(); });
    setInterval(() => this.ping(), PING_EVERY_MS);
  }

  state(state, text) {
    this.current = state;
    this.onState(state, text);
  }

  connect() {
    this.timer = null;
    const scheme = location.protocol === 'https:' ? 'wss' : 'ws';
    const ws = new WebSocket(`${scheme}://${location.host}/rpc`);
    this.ws = ws;
    ws.addEventListener('open', () => {
      if (this.ws !== ws) return;
      this.open = true;
      this.attempt = 0;
      this.connections += 1;
      this.state('connected', this.connections > 1 ? 'connected again' : 'connected');
      for (const w of this.waiters.splice(0)) w();
      for (const sub of this.subs) this.make(sub, this.connections > 1);
    });
    ws.addEventListener('message', (e) => { if (this.ws === ws) this.received(e.data); });
    ws.addEventListener('close', () => { if (this.ws === ws) this.closed(); });
  }

  closed() {
    this.open = false;
    for (const { reject } of this.pending.values()) reject(new Error('the connection to kdd closed'));
    this.pending.clear();
    this.byId.clear();
    for (const sub of this.subs) sub.id = null;
    const delay = Math.min(MAX_BACKOFF_MS, 500 * 2 ** this.attempt) * (0.8 + Math.random() * 0.4);
    this.attempt += 1;
    this.state('reconnecting', `disconnected — trying again in ${Math.ceil(delay / 1000)} s`);
    this.timer = setTimeout(() => this.connect(), delay);
    this.paired();
  }

  // Whether kdd still knows this browser (a restarted kdd forgets every
  // session): a refused WebSocket does not say why, a POST does.
  paired() {
    fetch('/rpc', { method: 'POST', headers: { 'Content-Type': 'application/json' }, credentials: 'same-origin',
      body: JSON.stringify({ jsonrpc: '2.0', id: 0, method: 'daemon.hello' }) })
      .then((r) => {
        if (r.status === 401 && !this.open) {
          this.state('unpaired', 'kdd does not know this browser any more: open a new link from kd web');
        }
      }, () => {});
  }

  retryNow() {
    if (this.open || !this.timer) return;
    clearTimeout(this.timer);
    this.connect();
  }

  ping() {
    if (!this.open) return;
    const ws = this.ws;
    const late = setTimeout(() => { if (this.ws === ws && this.open) ws.close(); }, PING_PATIENCE_MS);
    this.call('daemon.hello', {}).then(() => clearTimeout(late), () => clearTimeout(late));
  }

  received(data) {
    let m;
    try { m = JSON.parse(data); } catch { return; }
    if (m.id !== undefined && m.id !== null && this.pending.has(m.id)) {
      const { resolve, reject } = this.pending.get(m.id);
      this.pending.delete(m.id);
      if (m.error) reject(Object.assign(new Error(m.error.message), { code: m.error.code, data: m.error.data }));
      else resolve(m.result);
    } else if (m.method && m.params) {
      const sub = this.byId.get(m.params.subscription);
      if (sub) sub.onItem(m.params.result);
    }
  }

  whenOpen() {
    if (this.open) return Promise.resolve();
    return new Promise((resolve) => this.waiters.push(resolve));
  }

  async call(method, params = {}) {
    await this.whenOpen();
    const id = this.nextId++;
    const answer = new Promise((resolve, reject) => this.pending.set(id, { resolve, reject }));
    this.ws.send(JSON.stringify({ jsonrpc: '2.0', id, method, params }));
    return answer;
  }

  // Makes `sub` on the connection now open; `again`: it is being made
  // again after a drop (its `onResume` is told first).
  async make(sub, again) {
    if (again && sub.onResume) sub.onResume();
    const params = typeof sub.params === 'function' ? sub.params() : sub.params;
    let id;
    try {
      id = await this.call(sub.method, params);
    } catch (e) {
      // The connection dropped first: it is made again on the next one.
      if (e.code !== undefined && sub.onError) sub.onError(e);
      return;
    }
    if (sub.stopped) {
      this.call(sub.unsubscribe, { subscription: id }).catch(() => {});
      return;
    }
    sub.id = id;
    this.byId.set(id, sub);
    if (sub.made) { sub.made(); sub.made = null; }
  }

  // Subscribes; `onItem` gets each item. `params` may be a function, asked
  // each time the subscription is made (after a drop: e.g. since_seq after
  // the last message seen); `opts.onResume` is called before it is made
  // again. Resolves, once it is made the first time, to a function that
  // ends it; rejects when kdd refuses it the first time.
  subscribe(method, params, unsubscribe, onItem, opts = {}) {
    return new Promise((resolve, reject) => {
      const sub = { method, params, unsubscribe, onItem, onResume: opts.onResume, id: null, stopped: false };
      const stop = () => {
        sub.stopped = true;
        this.subs.delete(sub);
        if (sub.id !== null) {
          this.byId.delete(sub.id);
          if (this.open) this.call(unsubscribe, { subscription: sub.id }).catch(() => {});
        }
      };
      sub.made = () => resolve(stop);
      sub.onError = (e) => {
        if (sub.made) { this.subs.delete(sub); sub.made = null; reject(e); } else if (opts.onError) opts.onError(e);
      };
      this.subs.add(sub);
      if (this.open) this.make(sub, false);
    });
  }
}
