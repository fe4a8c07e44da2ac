// kd web: the page's router. Each view has its own URL (/, /t/<id>,
// /approvals, /attention, /work/<thread>); links marked data-link move with the
// history API, without reloading.

import { Rpc } from '/rpc.js';
import { threadsView } from '/threads.js';
import { threadView } from '/thread.js';
import { approvalsView, watchPending } from '/approvals.js';
import { workView } from '/work.js';
import { attentionView, watchAttention } from '/attention.js';

const conn = document.getElementById('conn');
const rpc = new Rpc((state, text) => { conn.textContent = text || state; conn.dataset.state = state; });
const main = document.getElementById('view');
let leave = () => {};

function route() {
  leave();
  leave = () => {};
  main.replaceChildren();
  const path = location.pathname;
  let m;
  if (path === '/') leave = threadsView(rpc, main);
  else if (path === '/approvals') leave = approvalsView(rpc, main);
  else if (path === '/attention') leave = attentionView(rpc, main);
  else if ((m = path.match(/^\/t\/([^/]+)$/))) leave = threadView(rpc, main, decodeURIComponent(m[1]));
  else if ((m = path.match(/^\/work\/([^/]+)$/))) leave = workView(rpc, main, decodeURIComponent(m[1]));
  else main.textContent = 'Not found.';
  main.focus({ preventScroll: true });
}

export function go(path) {
  history.pushState(null, '', path);
  route();
}

document.addEventListener('click', (e) => {
  const a = e.target.closest('a[data-link]');
  if (!a || e.ctrlKey || e.metaKey || e.shiftKey || e.button !== 0) return;
  e.preventDefault();
  go(a.getAttribute('href'));
});
window.addEventListener('popstate', route);
watchPending(rpc, document.getElementById('pending-count'));
watchAttention(rpc, document.getElementById('attention-count'));
route();
