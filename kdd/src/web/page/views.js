// The views. Everything an agent or a user wrote reaches the page as
// text (textContent, text nodes), never as HTML: no element is made from
// a string, so an answer holding <script> or <img onerror> shows as what
// it is.

// An element with attributes and children (strings become text nodes).
function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') e.className = v;
    else if (k.startsWith('data-')) e.setAttribute(k, v);
    else e[k] = v;
  }
  for (const c of children) if (c !== null && c !== undefined) e.append(c);
  return e;
}

function ago(ms) {
  const s = Math.max(0, Math.round((Date.now() - ms) / 1000));
  if (s < 60) return `${s}s ago`;
  if (s < 3600) return `${Math.floor(s / 60)}m ago`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ago`;
  return `${Math.floor(s / 86400)}d ago`;
}

function failure(parent, e) {
  parent.append(el('p', { class: 'error', role: 'alert' }, `kdd said: ${e.message}`));
}

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

// A message or a streaming answer, as a block.
function block(cls, from, attrs) {
  const text = el('div', { class: 'body' });
  const node = el('article', { class: `msg ${cls}`, ...attrs },
    el('header', {}, el('span', { class: 'from' }, from), el('span', { class: 'state' })),
    text);
  return { node, text };
}

// `/t/<id>`: a thread's messages, members' answers streaming live token
// by token, and the ask box.
export function threadView(rpc, main, id) {
  const title = el('h1', {}, id);
  const list = el('div', { id: 'messages', 'aria-live': 'polite' });
  main.append(el('p', {}, el('a', { href: '/', 'data-link': '' }, '← Threads')), title, list);
  rpc.call('thread.get', { thread: id }).then((t) => {
    title.textContent = t.title || t.id;
    main.insertBefore(el('p', { class: 'meta' }, `${t.workspace} · ${t.status} · ${t.members.join(', ')}`),
      list);
  }, (e) => failure(main, e));

  const bySeq = new Map();
  const byRun = new Map();
  const scroll = () => {
    if (window.innerHeight + window.scrollY >= document.body.scrollHeight - 200) window.scrollTo(0, document.body.scrollHeight);
  };
  function message(m) {
    if (bySeq.has(m.seq)) return;
    const runId = m.run && m.run.run_id;
    const streaming = runId && byRun.get(runId);
    const b = block(`${m.kind}`, m.from, { 'data-seq': String(m.seq), 'data-from': m.from });
    b.text.textContent = m.body;
    if (streaming) {
      streaming.node.replaceWith(b.node);
      byRun.delete(runId);
    } else {
      list.append(b.node);
    }
    bySeq.set(m.seq, b);
    scroll();
  }
  function run(runId, member) {
    let b = byRun.get(runId);
    if (!b) {
      b = block('streaming', member, { 'data-run': runId, 'data-from': member });
      b.stream = document.createTextNode('');
      b.text.append(b.stream);
      byRun.set(runId, b);
      list.append(b.node);
    }
    return b;
  }
  function event(e) {
    switch (e.type) {
      case 'message': message(e.message); break;
      case 'run_waiting': run(e.run.id, e.run.member).node.querySelector('.state').textContent = 'waiting'; break;
      case 'run_started': run(e.run, e.member).node.querySelector('.state').textContent = 'writing'; break;
      case 'delta': run(e.run, e.member).stream.appendData(e.text); scroll(); break;
      case 'activity': run(e.run, e.member).node.querySelector('.state').textContent = e.what; break;
      case 'approval_requested':
        if (byRun.has(e.approval.run)) byRun.get(e.approval.run).node.querySelector('.state').textContent =
          `waits for your approval: ${e.approval.tool.title}`;
        break;
      case 'lagged': list.append(el('p', { class: 'notice' }, `fell behind: ${e.missed} live items skipped`)); break;
      default: break;
    }
  }
  let stop = () => {};
  let left = false;
  rpc.subscribe('thread.subscribe', { thread: id, since_seq: 0 }, 'thread.unsubscribe', event)
    .then((s) => { if (left) s(); else stop = s; }, (e) => failure(main, e));

  // The ask box: leading @member words say whom to ask.
  const text = el('textarea', { id: 'ask-text', rows: 3, placeholder: 'Ask the council… (@member to ask one)',
    required: true });
  text.setAttribute('aria-label', 'Your question');
  const send = el('button', { id: 'ask-send', type: 'submit' }, 'Ask');
  const said = el('p', { class: 'said', role: 'status' });
  const form = el('form', { id: 'ask' }, text, send, said);
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    let body = text.value.trim();
    const to = [];
    let m;
    while ((m = body.match(/^@([A-Za-z0-9_.-]+)\s*/))) { to.push(m[1]); body = body.slice(m[0].length); }
    if (!body) return;
    send.disabled = true;
    const params = { thread: id, body };
    if (to.length) params.to = to;
    rpc.call('council.send', params).then((sent) => {
      text.value = '';
      said.textContent = `asked ${sent.members.join(', ') || 'no one'}`;
    }, (err) => { said.textContent = `kdd said: ${err.message}`; })
      .finally(() => { send.disabled = false; });
  });
  text.addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) form.requestSubmit();
  });
  main.append(form);
  return () => { left = true; stop(); };
}

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
  const node = el('li', { class: 'approval', 'data-id': a.id },
    el('div', { class: 'what' }, el('strong', {}, a.member), ` wants to ${a.tool.kind}: `,
      el('code', {}, a.tool.command || a.tool.title)),
    el('div', { class: 'where' }, 'in ', el('a', { href: `/t/${encodeURIComponent(a.thread)}`, 'data-link': '' }, a.thread),
      ` · ${ago(a.requested_at_ms)}`),
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

// `/work/<thread>`: not in the page yet.
export function workView(rpc, main, thread) {
  main.append(el('h1', {}, 'Work'),
    el('p', {}, 'The work view is not in kd web yet: use kd work and kd diff. ',
      el('a', { href: `/t/${encodeURIComponent(thread)}`, 'data-link': '' }, 'Back to the thread')));
  return () => {};
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
