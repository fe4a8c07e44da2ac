// JSON-RPC 2.0 over the page's WebSocket to /rpc: calls, and
// subscriptions whose notifications are handed to a callback. The same
// methods as kdd's socket (docs/api.md).

export class Rpc {
  constructor(onState) {
    this.nextId = 1;
    this.pending = new Map();
    this.subs = new Map();
    this.onState = onState;
    this.ready = this.connect();
  }

  connect() {
    const scheme = location.protocol === 'https:' ? 'wss' : 'ws';
    return new Promise((resolve, reject) => {
      const ws = new WebSocket(`${scheme}://${location.host}/rpc`);
      ws.addEventListener('open', () => { this.onState('connected'); resolve(ws); });
      ws.addEventListener('message', (e) => this.received(e.data));
      ws.addEventListener('close', () => {
        this.onState('disconnected — reload the page');
        for (const { reject: r } of this.pending.values()) r(new Error('the connection to kdd closed'));
        this.pending.clear();
        reject(new Error('cannot connect to kdd'));
      });
      this.ws = ws;
    });
  }

  received(data) {
    let m;
    try { m = JSON.parse(data); } catch { return; }
    if (m.id !== undefined && m.id !== null && this.pending.has(m.id)) {
      const { resolve, reject } = this.pending.get(m.id);
      this.pending.delete(m.id);
      if (m.error) reject(Object.assign(new Error(m.error.message), { code: m.error.code }));
      else resolve(m.result);
    } else if (m.method && m.params) {
      const cb = this.subs.get(m.params.subscription);
      if (cb) cb(m.params.result);
    }
  }

  async call(method, params = {}) {
    const ws = await this.ready;
    const id = this.nextId++;
    const answer = new Promise((resolve, reject) => this.pending.set(id, { resolve, reject }));
    ws.send(JSON.stringify({ jsonrpc: '2.0', id, method, params }));
    return answer;
  }

  // Subscribes; `onItem` gets each item. Returns a function that ends it.
  async subscribe(method, params, unsubscribe, onItem) {
    const id = await this.call(method, params);
    this.subs.set(id, onItem);
    return () => {
      this.subs.delete(id);
      this.call(unsubscribe, { subscription: id }).catch(() => {});
    };
  }
}
