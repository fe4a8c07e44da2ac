// kd web: the threads list (`/`): live, searchable, with what each cost.
import { el, ago, failure, usd } from '/dom.js';

// How often the list is read again while the page is shown (kdd has no
// subscription across threads; a read of the list is one query).
const REFRESH_MS = 3000;

// A search hit: the thread, who wrote it, the words around it.
function hitItem(h, titles) {
  const href = `/t/${encodeURIComponent(h.thread)}`;
  return el('li', { class: 'hit', 'data-thread': h.thread },
    el('a', { href, 'data-link': '' }, titles.get(h.thread) || h.thread),
    el('span', { class: 'where' }, ` · ${h.from} · ${ago(h.at_ms)}`),
    el('div', { class: 'snippet' }, h.snippet));
}

// `/`: the threads, newest activity first, kept up to date; a search of
// every message; archived threads on demand. Keys: / searches, j and k
// (or ↓ ↑) move between threads, Enter opens one.
export function threadsView(rpc, main) {
  const query = el('input', { type: 'search', id: 'search', placeholder: 'Search every thread…  ( / )',
    autocomplete: 'off' });
  query.setAttribute('aria-label', 'Search every thread');
  const searchForm = el('form', { id: 'search-form', role: 'search' }, query,
    el('button', { type: 'submit' }, 'Search'));
  const archived = el('input', { type: 'checkbox', id: 'show-archived' });
  const hits = el('ul', { id: 'hits', hidden: true });
  const body = el('tbody');
  const table = el('table', { id: 'threads' },
    el('thead', {}, el('tr', {}, el('th', {}, 'Title'), el('th', {}, 'Workspace'), el('th', {}, 'Status'),
      el('th', {}, 'Last activity'), el('th', { class: 'cost' }, 'Cost'))),
    body);
  const empty = el('p', { class: 'empty', hidden: true }, 'No thread yet: ask with kd ask.');
  main.append(el('h1', {}, 'Threads'), searchForm,
    el('label', { class: 'check' }, archived, ' Show archived threads'), hits, table, empty);

  const rows = new Map();
  const titles = new Map();
  let threads = [];
  let costs = new Map();
  let left = false;

  function row(t) {
    let r = rows.get(t.id);
    if (!r) {
      const link = el('a', { href: `/t/${encodeURIComponent(t.id)}`, 'data-link': '' });
      r = el('tr', { class: 'thread', 'data-thread': t.id },
        el('td', { class: 'title' }, link), el('td', { class: 'workspace' }), el('td', { class: 'status' }),
        el('td', { class: 'when' }), el('td', { class: 'cost' }));
      rows.set(t.id, r);
    }
    const [title, workspace, status, when, cost] = r.children;
    title.firstChild.textContent = t.title || t.id;
    workspace.textContent = t.workspace;
    status.textContent = t.status;
    status.className = `status ${t.status}`;
    when.textContent = ago(t.last_activity_at_ms);
    when.dataset.ms = String(t.last_activity_at_ms);
    cost.textContent = usd(costs.get(t.id));
    r.dataset.status = t.status;
    return r;
  }

  function show() {
    const shown = threads.filter((t) => archived.checked || t.status !== 'archived');
    const focused = document.activeElement;
    // Rows move only when their order changes (focus stays where it was).
    shown.forEach((t, i) => {
      const r = row(t);
      if (body.children[i] !== r) body.insertBefore(r, body.children[i] || null);
    });
    while (body.children.length > shown.length) body.lastChild.remove();
    if (focused && focused !== document.activeElement && document.contains(focused)) focused.focus();
    empty.hidden = shown.length > 0;
    empty.textContent = threads.length ? 'Every thread is archived: show archived threads to see them.'
      : 'No thread yet: ask with kd ask.';
  }

  let errorShown = false;
  let reading = false;
  async function refresh() {
    // One read at a time (while the connection is down, reads wait for it).
    if (reading) return;
    reading = true;
    try {
      const [list, report] = await Promise.all([rpc.call('thread.list', {}),
        rpc.call('cost.report', { by: 'thread' }).catch(() => null)]);
      if (left) return;
      list.sort((a, b) => b.last_activity_at_ms - a.last_activity_at_ms);
      threads = list;
      for (const t of list) titles.set(t.id, t.title || t.id);
      if (report) costs = new Map(report.rows.map((c) => [c.key, c.cost_usd]));
      show();
    } catch (e) {
      if (!left && !errorShown && e.code !== undefined) { errorShown = true; failure(main, e); }
    } finally {
      reading = false;
    }
  }
  archived.addEventListener('change', show);
  refresh();
  const timer = setInterval(() => { if (!document.hidden) refresh(); }, REFRESH_MS);
  const visible = () => { if (!document.hidden) refresh(); };
  document.addEventListener('visibilitychange', visible);

  searchForm.addEventListener('submit', (e) => {
    e.preventDefault();
    const q = query.value.trim();
    if (!q) { hits.hidden = true; hits.replaceChildren(); return; }
    rpc.call('search.query', { query: q, limit: 50 }).then((found) => {
      hits.replaceChildren(...(found.length ? found.map((h) => hitItem(h, titles))
        : [el('li', { class: 'empty' }, `Nothing found for “${q}”.`)]));
      hits.hidden = false;
    }, (err) => {
      hits.replaceChildren(el('li', { class: 'error', role: 'alert' }, `kdd said: ${err.message}`));
      hits.hidden = false;
    });
  });
  query.addEventListener('keydown', (e) => {
    if (e.key === 'Escape') { query.value = ''; hits.hidden = true; query.blur(); }
  });

  function keys(e) {
    if (e.ctrlKey || e.metaKey || e.altKey) return;
    const typing = e.target.closest && e.target.closest('input, textarea, select');
    if (e.key === '/' && !typing) { e.preventDefault(); query.focus(); return; }
    if (typing) return;
    const links = [...body.querySelectorAll('tr.thread a')];
    if (!links.length) return;
    const at = links.indexOf(document.activeElement);
    let to = null;
    if (e.key === 'j' || e.key === 'ArrowDown') to = Math.min(links.length - 1, at + 1);
    else if (e.key === 'k' || e.key === 'ArrowUp') to = Math.max(0, at < 0 ? 0 : at - 1);
    if (to === null) return;
    e.preventDefault();
    links[to].focus();
  }
  document.addEventListener('keydown', keys);
  return () => {
    left = true;
    clearInterval(timer);
    document.removeEventListener('visibilitychange', visible);
    document.removeEventListener('keydown', keys);
  };
}
