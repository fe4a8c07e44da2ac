// kd web: attention (`/attention`): kd's notifications (notify.subscribe:
// an approval waits, an exchange or a work task ended, a member failed or
// timed out, a budget stopped, an emergency is not acknowledged), the
// header's count of those not yet seen, and — when the user allows it —
// the browser's own notifications (the Notification API), each opening the
// view it is about.
import { el, ago } from '/dom.js';

// What this browser saw last (numbers grow, larger after kdd restarts).
const SEEN = 'kd.attention.seen';
const SHOWN = 'kd.attention.shown';
// A notification kept by kdd but older than this is not shown again as a
// browser notification when a page opens.
const FRESH_MS = 60_000;

const notes = [];
const listeners = new Set();

function stored(key) {
  const v = Number(localStorage.getItem(key));
  return Number.isFinite(v) ? v : 0;
}

// The page's URL a notification is about.
export function linkOf(n) {
  if (n.kind === 'approval') return '/approvals';
  if (!n.thread) return '/attention';
  if (n.kind === 'work') return `/work/${encodeURIComponent(n.thread)}`;
  return `/t/${encodeURIComponent(n.thread)}`;
}

function open(path) {
  history.pushState(null, '', path);
  window.dispatchEvent(new PopStateEvent('popstate'));
}

function supported() {
  return typeof window.Notification === 'function';
}

// A browser notification for `n`, when allowed and it is new to this browser.
function tell(n) {
  if (!supported() || Notification.permission !== 'granted') return;
  const shown = stored(SHOWN);
  if (n.id <= shown) return;
  if (!shown && n.at_ms < Date.now() - FRESH_MS) return;
  localStorage.setItem(SHOWN, String(n.id));
  const link = linkOf(n);
  if (!document.hidden && location.pathname === link) return;
  const b = new Notification(n.title, { body: n.text, tag: `kd-${n.id}` });
  b.onclick = () => { window.focus(); open(link); b.close(); };
}

// Follows kd's notifications for the whole page: the count in `badge`
// (those newer than the last visit to /attention) and the browser's
// notifications.
export function watchAttention(rpc, badge) {
  const show = () => {
    const seen = stored(SEEN);
    const unseen = notes.filter((n) => n.id > seen).length;
    badge.textContent = unseen ? String(unseen) : '';
  };
  listeners.add(show);
  // Made again after a drop from the last one seen: nothing twice.
  const since = () => (notes.length ? { since: notes[notes.length - 1].id } : {});
  rpc.subscribe('notify.subscribe', since, 'notify.unsubscribe', (e) => {
    if (e.type !== 'notified') return;
    const n = e.notification;
    if (notes.some((m) => m.id === n.id)) return;
    notes.push(n);
    tell(n);
    for (const l of listeners) l();
  }).catch(() => {});
}

function item(n) {
  const link = linkOf(n);
  return el('li', { class: `note ${n.kind}`, 'data-id': String(n.id), 'data-kind': n.kind },
    el('div', { class: 'what' }, el('span', { class: 'kind' }, n.kind), ' ',
      el('a', { href: link, 'data-link': '' }, n.title)),
    n.text ? el('div', { class: 'text' }, n.text) : null,
    el('div', { class: 'where' }, [n.workspace, ago(n.at_ms)].filter(Boolean).join(' · ')));
}

function permission(said) {
  if (!supported()) return 'This browser has no notifications.';
  if (Notification.permission === 'granted') return 'This browser shows kd\'s notifications.';
  if (Notification.permission === 'denied') return 'This browser blocks kd\'s notifications (the site\'s settings).';
  return said || '';
}

// `/attention`: kd's notifications, newest first, live; visiting marks them seen.
export function attentionView(rpc, main) {
  main.append(el('h1', {}, 'Attention'));
  const state = el('p', { class: 'said', role: 'status', id: 'notify-state' });
  const allow = el('button', { type: 'button', id: 'notify-allow' }, 'Notify me in this browser');
  const refresh = () => {
    state.textContent = permission();
    allow.hidden = !supported() || Notification.permission !== 'default';
  };
  allow.addEventListener('click', () => {
    Notification.requestPermission().then(refresh, () => refresh());
  });
  refresh();
  const list = el('ul', { id: 'attention' });
  const empty = el('p', { class: 'empty' }, 'Nothing has needed you since kdd started.');
  main.append(el('div', { class: 'buttons' }, allow, state), empty, list);
  const drawn = new Set();
  const draw = () => {
    for (const n of notes) {
      if (drawn.has(n.id)) continue;
      drawn.add(n.id);
      list.prepend(item(n));
    }
    empty.hidden = notes.length > 0;
    const newest = notes.reduce((m, n) => Math.max(m, n.id), 0);
    if (newest > stored(SEEN)) localStorage.setItem(SEEN, String(newest));
  };
  const update = () => { draw(); for (const l of listeners) if (l !== update) l(); };
  listeners.add(update);
  update();
  return () => { listeners.delete(update); };
}
