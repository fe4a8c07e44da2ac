// kd web: one thread (`/t/<id>`): its messages (members' answers rendered
// from markdown by kdd), answers streaming live, the thread's actions
// (title, fork, archive) and the ask box.
import { el, failure, renderMarkdown, usd } from '/dom.js';
import { go } from '/app.js';

// Kinds of message whose body is a member's markdown, rendered by kdd.
const MARKDOWN = new Set(['agent', 'interrupted']);
// Answers shown as text are rendered together, this long after the first
// of them arrived: a history of a thousand comes as a few calls, not one
// per message, while kdd is still sending it.
const RENDER_AFTER_MS = 50;

// A message or a streaming answer, as a block.
function block(cls, from, attrs) {
  const text = el('div', { class: 'body' });
  const state = el('span', { class: 'state' });
  const actions = el('span', { class: 'actions' });
  const node = el('article', { class: `msg ${cls}`, ...attrs },
    el('header', {}, el('span', { class: 'from' }, from), state, actions), text);
  return { node, text, state, actions };
}

function button(label, attrs, onClick) {
  const b = el('button', { type: 'button', ...attrs }, label);
  b.addEventListener('click', onClick);
  return b;
}

// A member's name as a ticked box of the ask box.
function memberBox(name) {
  const box = el('input', { type: 'checkbox', name: 'to', value: name, checked: true });
  return el('label', { class: 'check member' }, box, ` ${name}`);
}

// `/t/<id>`: a thread's messages, members' answers streaming live token
// by token, and the ask box.
export function threadView(rpc, main, id) {
  const title = el('h1', {}, id);
  const meta = el('p', { class: 'meta' });
  const said = el('p', { class: 'said', role: 'status' });
  const list = el('div', { id: 'messages', 'aria-live': 'polite' });
  const tools = el('div', { class: 'buttons', id: 'thread-tools' });
  main.append(el('p', {}, el('a', { href: '/', 'data-link': '', class: 'back' }, '← Threads')), title, meta, tools, said, list);
  let thread = null;
  let left = false;
  const tell = (text) => { said.textContent = text; };
  const refused = (e) => tell(`kdd said: ${e.message}`);

  // The thread's line, its buttons and the members of the ask box.
  function showThread(t) {
    thread = t;
    title.textContent = t.title || t.id;
    document.title = `${t.title || t.id} — kd`;
    // A new thread learns its members at its first message: until then,
    // the council's (as kd chat shows them).
    const names = t.members.length ? t.members : council;
    meta.textContent = `${t.workspace} · ${t.status}${names.length ? ` · ${names.join(', ')}` : ''}`;
    meta.dataset.status = t.status;
    archive.textContent = t.status === 'archived' ? 'Unarchive' : 'Archive';
    archive.dataset.archived = String(t.status === 'archived');
    const have = new Set([...members.querySelectorAll('input')].map((b) => b.value));
    for (const m of names) if (!have.has(m)) members.append(memberBox(m));
    if (chair.options.length !== names.length) chair.replaceChildren(...names.map((m) => el('option', { value: m }, m)));
  }
  let council = [];
  const load = () => rpc.call('thread.get', { thread: id }).then(async (t) => {
    if (!t.members.length && !council.length) {
      const config = await rpc.call('config.get', { workspace: t.workspace }).catch(() => null);
      const entry = config && config.entries.find((e) => e.key === 'council.members');
      if (entry && Array.isArray(entry.value)) council = entry.value.filter((m) => typeof m === 'string');
    }
    if (!left) showThread(t);
  }, (e) => failure(main, e));
  const loadCost = () => rpc.call('cost.report', { thread: id, by: 'member' }).then((r) => {
    cost.textContent = r.total.cost_usd ? `cost ${usd(r.total.cost_usd)}` : '';
  }, () => {});

  // Title, fork, archive.
  const rename = button('Rename', { id: 'rename' }, () => {
    const input = el('input', { type: 'text', id: 'title-input', value: thread ? thread.title || '' : '',
      maxLength: 200, required: true });
    input.setAttribute('aria-label', 'The thread\'s title');
    const form = el('form', { class: 'inline', id: 'title-form' }, input, el('button', { type: 'submit' }, 'Save'),
      button('Cancel', {}, () => form.replaceWith(title)));
    form.addEventListener('submit', (e) => {
      e.preventDefault();
      rpc.call('thread.set_title', { thread: id, title: input.value }).then((t) => {
        showThread(t);
        form.replaceWith(title);
        tell('title saved');
      }, refused);
    });
    input.addEventListener('keydown', (e) => { if (e.key === 'Escape') form.replaceWith(title); });
    title.replaceWith(form);
    input.focus();
  });
  const fork = button('Fork', { id: 'fork' }, () => {
    rpc.call('thread.fork', { thread: id }).then((t) => go(`/t/${encodeURIComponent(t.id)}`), refused);
  });
  const archive = button('Archive', { id: 'archive' }, () => {
    const method = archive.dataset.archived === 'true' ? 'thread.unarchive' : 'thread.archive';
    rpc.call(method, { thread: id }).then((t) => { showThread(t); tell(`${t.status}`); }, refused);
  });
  const interrupt = button('Interrupt', { id: 'interrupt', class: 'deny', hidden: true }, () => {
    rpc.call('council.interrupt', { thread: id, all: true }).then((r) => {
      tell(`interrupted ${r.runs.length} run${r.runs.length === 1 ? '' : 's'}`);
    }, refused);
  });
  const cost = el('span', { class: 'where', id: 'thread-cost' });
  tools.append(rename, fork, archive,
    el('a', { href: `/work/${encodeURIComponent(id)}`, 'data-link': '', class: 'button' }, 'Work'),
    interrupt, cost);

  // Messages and runs.
  const bySeq = new Map();
  const byRun = new Map();
  let lastSeq = 0;
  let toRender = [];
  const bodies = new Map();
  let renderQueued = false;
  function queueRender(seq, node) {
    toRender.push(seq);
    bodies.set(seq, node);
    if (renderQueued) return;
    renderQueued = true;
    setTimeout(() => {
      renderQueued = false;
      const seqs = toRender;
      toRender = [];
      const nodes = new Map(seqs.map((s) => [s, bodies.get(s)]));
      for (const s of seqs) bodies.delete(s);
      renderMarkdown(rpc, id, seqs, nodes).catch(() => {});
    }, RENDER_AFTER_MS);
  }
  // Where each block stands (kd-proto's order.rs, as kd chat shows a
  // thread): an answer right after the message it answers, among its
  // siblings in the order their runs started; anything else at its seq.
  const places = new WeakMap();
  const before = (a, b) => { for (let i = 0; i < 4; i++) if (a[i] !== b[i]) return a[i] < b[i]; return false; };
  function place(node, at) {
    places.set(node, at);
    let next = null;
    for (let c = list.lastElementChild; c; c = c.previousElementSibling) {
      const p = places.get(c);
      if (p && !before(at, p)) break;
      if (p) next = c;
    }
    list.insertBefore(node, next);
  }
  const messagePlace = (m) => (m.reply_to && m.run && m.run.ordinal != null && m.reply_to < m.seq
    ? [m.reply_to, 1, m.run.ordinal, m.seq] : [m.seq, 0, 0, m.seq]);
  // The view follows the end while the reader is at it (as they scroll:
  // reading the layout for each message of a long history would lay the
  // page out once per message); one scroll per frame.
  const nearBottom = () => window.innerHeight + window.scrollY >= document.body.scrollHeight - 200;
  let pinned = true;
  let scrollQueued = false;
  const onScroll = () => { if (!scrollQueued) pinned = nearBottom(); };
  window.addEventListener('scroll', onScroll, { passive: true });
  const scroll = () => {
    if (!pinned || scrollQueued) return;
    scrollQueued = true;
    requestAnimationFrame(() => { window.scrollTo(0, document.body.scrollHeight); scrollQueued = false; });
  };
  const streaming = () => { interrupt.hidden = byRun.size === 0; };

  function message(m) {
    if (m.seq > lastSeq) lastSeq = m.seq;
    if (bySeq.has(m.seq)) return;
    const runId = m.run && m.run.run_id;
    const live = runId && byRun.get(runId);
    const b = block(`${m.kind}`, m.from, { 'data-seq': String(m.seq), 'data-from': m.from, 'data-kind': m.kind });
    b.text.textContent = m.body;
    // Cut short: by you or kdd stopping, or (said) by a member's emergency broadcast.
    if (m.kind === 'interrupted') b.state.textContent = (m.run && m.run.stopped) || 'interrupted';
    if (MARKDOWN.has(m.kind) && m.body) queueRender(m.seq, b.text);
    if (m.kind === 'error') {
      b.actions.append(button('Retry', { class: 'retry' }, (e) => {
        e.target.disabled = true;
        rpc.call('council.retry', { thread: id }).then((runs) => {
          tell(runs.length ? `asked ${runs.map((r) => r.member).join(', ')} again` : 'nothing to retry');
        }, (err) => { e.target.disabled = false; refused(err); });
      }));
    }
    // A retry's answer takes the place of the failure it replaces.
    const replaced = m.replaces && bySeq.get(m.replaces);
    if (live) {
      live.node.replaceWith(b.node);
      places.set(b.node, places.get(live.node));
      byRun.delete(runId);
      streaming();
      if (replaced) replaced.node.remove();
    } else if (replaced && replaced.node.isConnected) {
      replaced.node.replaceWith(b.node);
      places.set(b.node, places.get(replaced.node));
    } else {
      place(b.node, messagePlace(m));
    }
    bySeq.set(m.seq, b);
    scroll();
  }
  function run(runId, member, info) {
    let b = byRun.get(runId);
    if (!b) {
      b = block('streaming', member, { 'data-run': runId, 'data-from': member });
      b.stream = document.createTextNode('');
      b.text.append(b.stream);
      b.actions.append(button('Cancel', { class: 'cancel' }, (e) => {
        e.target.disabled = true;
        rpc.call('run.cancel', { thread: id, run: runId }).catch((err) => { e.target.disabled = false; refused(err); });
      }));
      byRun.set(runId, b);
      // Its place is known when kdd says whom it answers (run_waiting);
      // joined mid-run, it goes last.
      const I = Number.MAX_SAFE_INTEGER;
      place(b.node, info ? [info.reply_to ?? I, 1, info.ordinal, I] : [I, 1, I, I]);
      streaming();
    }
    return b;
  }
  function event(e) {
    switch (e.type) {
      case 'message': message(e.message); break;
      case 'run_waiting': run(e.run.id, e.run.member, e.run).state.textContent = 'waiting'; break;
      case 'run_started': run(e.run, e.member).state.textContent = 'writing'; break;
      case 'delta': {
        run(e.run, e.member).stream.appendData(e.text);
        scroll();
        break;
      }
      case 'activity': run(e.run, e.member).state.textContent = e.what; break;
      case 'approval_requested':
        if (byRun.has(e.approval.run)) byRun.get(e.approval.run).state.textContent =
          `waits for your approval: ${e.approval.tool.title}`;
        break;
      case 'status':
        if (thread) showThread({ ...thread, status: e.status });
        break;
      case 'run_finished': case 'run_error': case 'run_cancelled': loadCost(); break;
      case 'lagged': list.append(el('p', { class: 'notice' }, `fell behind: ${e.missed} live items skipped`)); break;
      default: break;
    }
  }
  // After a drop the subscription is made again from the last message
  // seen; a run still streaming sends all its text again, so what was
  // shown of it is cleared first (runs that ended meanwhile end with
  // their message, in the backlog).
  const resume = () => {
    for (const b of byRun.values()) { b.stream.data = ''; b.state.textContent = 'reconnecting…'; }
    load();
  };
  let stop = () => {};
  // The history in one call, shown in one task (the page laid out once,
  // not once per message as a subscription's backlog would), then the
  // subscription from the last message shown.
  rpc.call('thread.messages', { thread: id }).catch(() => []).then((history) => {
    if (left) return;
    for (const m of history) message(m);
    rpc.subscribe('thread.subscribe', () => ({ thread: id, since_seq: lastSeq }), 'thread.unsubscribe', event,
      { onResume: resume, onError: (e) => failure(main, e) })
      .then((s) => { if (left) s(); else stop = s; }, (e) => failure(main, e));
  });
  load();
  loadCost();

  main.append(askBox(rpc, id, tell));
  const members = main.querySelector('#ask-members');
  const chair = main.querySelector('#ask-chair');
  return () => { left = true; stop(); window.removeEventListener('scroll', onScroll); };
}

// The ask box: the question, whom to ask (ticked members, or leading
// @member words), and how: rounds, or a vote, or a synthesis by a chair —
// council.send, or completion.agents as kd ask --vote / --synthesize.
// A vote's outcome in a few words: a tie is said as a tie, with what
// broke it (the tally's message in the thread says it in full).
function verdict(tally) {
  if (!tally) return 'done';
  const tie = tally.tie;
  if (!tie) return tally.winner ? `${tally.winner} wins` : 'no winner';
  const who = tie.members.join(' and ');
  if (tie.broken_by === 'king' || !tally.winner) return `tie between ${who}: left to you`;
  const how = tie.broken_by === 'chair' ? `the chair's ballot (${tie.chair})` : 'first places';
  return `tie between ${who}, broken by ${how}: ${tally.winner} wins`;
}

function askBox(rpc, id, tell) {
  const text = el('textarea', { id: 'ask-text', rows: 3, required: true,
    placeholder: 'Ask the council… (@member to ask one; Ctrl+Enter sends)' });
  text.setAttribute('aria-label', 'Your question');
  const send = el('button', { id: 'ask-send', type: 'submit' }, 'Ask');
  const members = el('fieldset', { id: 'ask-members', class: 'members' }, el('legend', {}, 'Ask'));
  const how = el('select', { id: 'ask-how' },
    el('option', { value: 'send' }, 'Discuss'),
    el('option', { value: 'vote' }, 'Vote'),
    el('option', { value: 'synthesize' }, 'Synthesize'));
  how.setAttribute('aria-label', 'How the members answer');
  const rounds = el('input', { type: 'number', id: 'ask-rounds', min: 0, max: 10, placeholder: 'default',
    inputMode: 'numeric' });
  const chair = el('select', { id: 'ask-chair' });
  chair.setAttribute('aria-label', 'The chair who synthesizes');
  const voteFirst = el('input', { type: 'checkbox', id: 'ask-vote-first' });
  const roundsLabel = el('label', { class: 'opt' }, 'Rounds after the first ', rounds);
  const chairLabel = el('label', { class: 'opt', hidden: true }, 'Chair ', chair);
  const voteLabel = el('label', { class: 'opt check', hidden: true }, voteFirst, ' vote first');
  const options = el('div', { class: 'options' }, el('label', { class: 'opt' }, 'How ', how), roundsLabel,
    chairLabel, voteLabel);
  how.addEventListener('change', () => {
    roundsLabel.hidden = how.value !== 'send';
    chairLabel.hidden = voteLabel.hidden = how.value !== 'synthesize';
  });
  const form = el('form', { id: 'ask' }, members, text, options, el('div', { class: 'buttons' }, send));
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    let body = text.value.trim();
    let to = [];
    let m;
    while ((m = body.match(/^@([A-Za-z0-9_.-]+)[\s,]*/))) { to.push(m[1].toLowerCase()); body = body.slice(m[0].length); }
    if (!body) return;
    const boxes = [...members.querySelectorAll('input')];
    if (!to.length && boxes.some((b) => !b.checked)) {
      to = boxes.filter((b) => b.checked).map((b) => b.value);
      if (!to.length) { tell('tick a member to ask (or start with @member)'); return; }
    }
    if (!rpc.open) { tell('not connected to kdd: ask again once it is back'); return; }
    send.disabled = true;
    const done = () => { send.disabled = false; };
    if (how.value === 'send') {
      const params = { thread: id, body };
      if (to.length) params.to = to;
      if (rounds.value !== '') params.rounds = Number(rounds.value);
      rpc.call('council.send', params).then((sent) => {
        text.value = '';
        tell(`asked ${sent.members.join(', ') || 'no one'}${sent.notice ? ` — ${sent.notice}` : ''}`);
      }, (err) => tell(`kdd said: ${err.message}`)).finally(done);
      return;
    }
    // A vote or a synthesis lasts as long as the members take: the call
    // answers at its end, the messages come by the subscription meanwhile.
    const params = { thread: id, body, aggregation: how.value, id: `c-${Date.now().toString(36)}${Math.random().toString(36).slice(2, 8)}` };
    if (to.length) params.agents = to;
    if (how.value === 'synthesize') { params.chair = chair.value; params.vote = voteFirst.checked; }
    text.value = '';
    done();
    tell(how.value === 'vote' ? 'the members answer, then vote…' : `the members answer, then ${chair.value} synthesizes…`);
    rpc.call('completion.agents', params).then((c) => {
      tell(c.synthesis ? `${c.synthesis.member || chair.value} wrote the synthesis` : `the vote: ${verdict(c.tally)}`);
    }, (err) => tell(`kdd said: ${err.message}`));
  });
  text.addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) form.requestSubmit();
  });
  return form;
}
