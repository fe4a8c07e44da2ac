// kd web: the threads list (`/`).
import { el, ago, failure } from '/dom.js';

// `/`: the threads, newest activity first.
export function threadsView(rpc, main) {
  main.append(el('h1', {}, 'Threads'));
  const body = el('tbody');
  const table = el('table', { id: 'threads' },
    el('thead', {}, el('tr', {}, el('th', {}, 'Title'), el('th', {}, 'Workspace'), el('th', {}, 'Status'),
      el('th', {}, 'Last activity'))),
    body);
  main.append(table);
  rpc.call('thread.list', {}).then((threads) => {
    threads.sort((a, b) => b.last_activity_at_ms - a.last_activity_at_ms);
    if (threads.length === 0) main.append(el('p', { class: 'empty' }, 'No thread yet: ask with kd ask.'));
    for (const t of threads) {
      body.append(el('tr', { class: 'thread', 'data-thread': t.id },
        el('td', {}, el('a', { href: `/t/${encodeURIComponent(t.id)}`, 'data-link': '' }, t.title || t.id)),
        el('td', { class: 'workspace' }, t.workspace),
        el('td', { class: `status ${t.status}` }, t.status),
        el('td', { class: 'when' }, ago(t.last_activity_at_ms))));
    }
  }, (e) => failure(main, e));
  return () => {};
}

