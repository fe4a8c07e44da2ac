// kd web: a thread's work (`/work/<thread>`).
import { el } from '/dom.js';

// `/work/<thread>`: not in the page yet.
export function workView(rpc, main, thread) {
  main.append(el('h1', {}, 'Work'),
    el('p', {}, 'The work view is not in kd web yet: use kd work and kd diff. ',
      el('a', { href: `/t/${encodeURIComponent(thread)}`, 'data-link': '' }, 'Back to the thread')));
  return () => {};
}

