// kd web: one thread (`/t/<id>`): its messages, answers streaming live, the ask box.
import { el, failure } from '/dom.js';

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
  main.append(el('p', {}, el('a', { href: '/', 'data-link': '' }, '← Threads'), ' · ',
    el('a', { href: `/work/${encodeURIComponent(id)}`, 'data-link': '', class: 'work-link' }, 'Work')), title, list);
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

