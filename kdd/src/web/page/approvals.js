// kd web: approvals (`/approvals`) and the header's count of pending ones.
import { el, ago, failure } from '/dom.js';

// One pending approval with its buttons.
function approvalItem(rpc, a, onGone) {
  const said = el('span', { class: 'said', role: 'status' });
  const decide = (decision) => () => {
    for (const b of node.querySelectorAll('button')) b.disabled = true;
    rpc.call('approval.decide', { id: a.id, decision }).then(() => onGone(a.id),
      (e) => { said.textContent = `kdd said: ${e.message}`; for (const b of node.querySelectorAll('button')) b.disabled = false; });
  };
  const approve = el('button', { class: 'approve', type: 'button' }, 'Approve');
  const deny = el('button', { class: 'deny', type: 'button' }, 'Deny');
  approve.addEventListener('click', decide('approve'));
  deny.addEventListener('click', decide('deny'));
  const place = el('a', { href: `/t/${encodeURIComponent(a.thread)}`, 'data-link': '' }, a.thread);
  // The thread by its title, once kdd says it.
  rpc.call('thread.get', { thread: a.thread }).then((t) => { if (t.title) place.textContent = t.title; }, () => {});
  const node = el('li', { class: 'approval', 'data-id': a.id },
    el('div', { class: 'what' }, el('strong', {}, a.member), ` wants to ${a.tool.kind}: `,
      el('code', {}, a.tool.command || a.tool.title)),
    // Why it asks, in the agent's words (claude's description, codex's reason).
    a.tool.reason ? el('div', { class: 'why' }, `why: ${a.tool.reason}`) : null,
    el('div', { class: 'where' }, 'in ', place, ` · ${ago(a.requested_at_ms)}`),
    el('div', { class: 'buttons' }, approve, deny, said));
  return node;
}

// `/approvals`: what members' CLIs ask, pending across every thread, live.
export function approvalsView(rpc, main) {
  main.append(el('h1', {}, 'Approvals'));
  const list = el('ul', { id: 'approvals' });
  const empty = el('p', { class: 'empty' }, 'Nothing waits for you.');
  main.append(empty, list);
  const items = new Map();
  const gone = (id) => {
    const n = items.get(id);
    if (n) { n.remove(); items.delete(id); }
    empty.hidden = items.size > 0;
  };
  const event = (e) => {
    if (e.type === 'requested' && e.approval.state === 'pending' && !items.has(e.approval.id)) {
      const n = approvalItem(rpc, e.approval, gone);
      items.set(e.approval.id, n);
      list.append(n);
      empty.hidden = true;
    } else if (e.type === 'decided') {
      gone(e.approval.id);
    }
  };
  let stop = () => {};
  let left = false;
  rpc.subscribe('approval.subscribe', {}, 'approval.unsubscribe', event)
    .then((s) => { if (left) s(); else stop = s; }, (e) => failure(main, e));
  return () => { left = true; stop(); };
}

// The count of pending approvals in the header, live.
export function watchPending(rpc, badge) {
  const pending = new Set();
  const show = () => { badge.textContent = pending.size ? String(pending.size) : ''; };
  rpc.subscribe('approval.subscribe', {}, 'approval.unsubscribe', (e) => {
    if (e.type === 'requested' && e.approval.state === 'pending') pending.add(e.approval.id);
    else if (e.type === 'decided') pending.delete(e.approval.id);
    show();
  }).catch(() => {});
}
