// kd web: a thread's work (`/work/<thread>`): each member's worktree (state,
// check, branch, commits), its diff highlighted by kdd (work.diff with
// highlight: tokens of text and class, drawn with textContent), line
// comments and "Send review", and the King's buttons (accept, squash,
// accept as PR, PR, rebase, check again, reject). Live: the thread's
// `work` events move states and checks and bring a revised diff.
import { el, failure } from '/dom.js';

const MODE_KEY = 'kd.diff.mode';
const NARROW = window.matchMedia('(max-width: 40rem)');
const SETTLED = new Set(['accepted', 'rejected', 'superseded']);
const short = (c) => (c || '').slice(0, 12);

// The view's style sheet, once.
function styleSheet() {
  if (document.getElementById('work-css')) return;
  document.head.append(el('link', { id: 'work-css', rel: 'stylesheet', href: '/work.css' }));
}

// The diff's mode: what the King chose last (remembered), unified on a phone.
function savedMode() {
  try { return localStorage.getItem(MODE_KEY) === 'split' ? 'split' : 'unified'; } catch { return 'unified'; }
}
function modeNow() { return NARROW.matches ? 'unified' : savedMode(); }

// A line's text as spans of its tokens (`hl-<class>`), never HTML.
function code(tokens) {
  const td = el('td', { class: 'code' });
  for (const t of tokens) td.append(t.class ? el('span', { class: `hl-${t.class}` }, t.text) : t.text);
  return td;
}

const SIGN = { added: '+', removed: '-', context: ' ', note: '' };

// The text of a diff row's line on the new side, without its sign.
function lineText(tr) {
  const cells = tr ? tr.querySelectorAll('td.code') : [];
  const td = cells[cells.length - 1];
  if (!td) return null;
  return [...td.childNodes].filter((n) => !(n.classList && n.classList.contains('sign'))).map((n) => n.textContent).join('');
}

// One member's card: its state, check, commits, buttons, diff and comments.
class Member {
  constructor(view, tree) {
    this.view = view;
    this.name = tree.member;
    this.tree = tree;
    this.diff = null;
    this.comments = [];
    this.node = el('section', { class: 'member', 'data-member': tree.member });
    this.head = el('div', { class: 'member-head' });
    this.commits = el('ul', { class: 'commits' });
    this.check = el('div', { class: 'check' });
    this.activity = el('p', { class: 'activity', role: 'status' });
    this.answers = el('ol', { class: 'answers' });
    this.answers.setAttribute('aria-live', 'polite');
    this.buttons = el('div', { class: 'buttons' });
    this.files = el('div', { class: 'files' });
    // Comments whose line a revision took away, kept until dismissed.
    this.kept = el('div', { class: 'kept' });
    this.elsewhere = el('div', { class: 'elsewhere' });
    this.node.append(this.head, this.check, this.commits, this.buttons, this.activity, this.answers,
      this.kept, this.files, this.elsewhere);
    this.drawHead();
    this.drawButtons();
  }

  rpc(method, params) { return this.view.rpc.call(method, { thread: this.view.thread, member: this.name, ...params }); }

  // What kdd answered a button, kept (errors too), newest last.
  said(text, error) {
    const li = el('li', { class: error ? 'error' : 'ok', role: error ? 'alert' : null }, text);
    this.answers.append(li);
    while (this.answers.children.length > 20) this.answers.firstChild.remove();
    return li;
  }

  drawHead() {
    const t = this.tree;
    const state = t.fixes && t.state === 'working' ? `fixing ${t.fixes}/${t.until_green}` : t.state;
    const stat = `${t.files} file${t.files === 1 ? '' : 's'} +${t.added} −${t.removed}`;
    const run = t.last_run && t.last_run !== 'finished' ? ` · last run ${t.last_run}` : '';
    const shipped = t.shipped ? el('span', { class: 'shipped' }, ' · ', t.shipped.url
      ? el('a', { href: t.shipped.url, rel: 'noreferrer noopener', target: '_blank' }, t.shipped.pr ? 'pull request' : 'open a pull request')
      : `pushed to ${t.shipped.remote}`,
      // The work moved on since it was pushed (a rebase, a review's revision).
      t.shipped.commit !== t.head ? el('span', { class: 'behind' }, ` behind the work (${short(t.head)}): PR pushes it`) : '') : null;
    // kd could not commit its last run: its changes are in the worktree only.
    const uncommitted = t.uncommitted
      ? el('p', { class: 'uncommitted', role: 'status' }, `last run not committed (${t.uncommitted}): its changes are in the worktree only`)
      : null;
    this.head.replaceChildren(
      el('h2', {}, this.name, ' ', el('span', { class: `state ${t.state}`, 'data-state': t.state }, state)),
      el('p', { class: 'meta' }, el('code', {}, t.branch), ` · ${short(t.base)}..${short(t.head)} · ${stat}${run}`, shipped),
      ...(uncommitted ? [uncommitted] : []));
    const c = t.check;
    this.check.replaceChildren();
    if (c) {
      const summary = c.status === 'running' ? 'checking…'
        : c.status === 'fail' && c.exit_code !== undefined ? `check fail (exit ${c.exit_code})` : `check ${c.status}`;
      const badge = el('span', { class: `check-status ${c.status}`, 'data-status': c.status }, summary);
      const when = c.status === 'running' ? '' : ` in ${(c.duration_ms / 1000).toFixed(1)} s`;
      this.check.append(badge, ` on ${short(c.commit)}${when}`);
      if (c.output) {
        this.check.append(el('details', { class: 'tail' }, el('summary', {}, 'output'), el('pre', {}, c.output)));
      }
    }
  }

  // The King's buttons; a settled work has none but its state.
  drawButtons() {
    this.buttons.replaceChildren();
    if (SETTLED.has(this.tree.state)) return;
    const b = (label, cls, fn) => {
      const button = el('button', { type: 'button', class: cls }, label);
      button.addEventListener('click', fn);
      this.buttons.append(button);
      return button;
    };
    const pending = this.comments.filter((c) => c.state === 'pending').length;
    const send = b(`Send review (${pending})`, 'send-review', () => this.act('work.send_review', {},
      (r) => `sent ${r.comments.length} comment${r.comments.length === 1 ? '' : 's'} to ${this.name}: it revises its work`,
      () => this.loadComments()));
    send.disabled = pending === 0;
    if (this.tree.state !== 'tampered') {
      // No commit: the King's branch held the work already.
      const taken = (how, r) => (r.commit ? `${how} into ${r.into} as ${short(r.commit)}` : `in ${r.into} already: accepted`);
      b('Accept', 'accept', () => this.act('work.accept', {}, (r) => taken('accepted', r)));
      b('Squash', 'squash', () => this.act('work.accept', { squash: true }, (r) => taken('squashed', r)));
      b('Accept as PR', 'accept-pr', () => this.act('work.pr', { accept: true }, (r) => this.pr(r)));
      b('PR', 'pr', () => this.act('work.pr', {}, (r) => this.pr(r)));
      b('Rebase', 'rebase', () => this.act('work.rebase', {}, (r) => this.rebased(r)));
      b('Check again', 'check-again', () => this.act('work.check', {}, () => 'checking again'));
    }
    b('Reject', 'reject', () => this.confirmReject());
  }

  // How a rebase ended; only a conflicting one names files.
  rebased(r) {
    switch (r.outcome) {
      case 'up_to_date':
        return `${this.name}'s branch already holds ${r.from}`;
      case 'merged':
        // A merge concluded with your HEAD detached is named by its commit.
        return `merged ${r.from === short(r.onto) ? r.from : `${r.from} (${short(r.onto)})`} into ${r.branch}: ${short(r.commit)}`;
      case 'resolving':
        return `${r.from} conflicts in ${(r.conflicts || []).join(', ')}: ${this.name} resolves them`;
      default:
        return r.outcome;
    }
  }

  pr(r) {
    const where = r.shipped.url ? `${r.shipped.pr ? 'pull request' : 'open one at'} ${r.shipped.url}` : '';
    const said = [where, r.note].filter((s) => s).join('; ');
    return `pushed ${r.branch} to ${r.shipped.remote}${said ? ` — ${said}` : ''}${r.accepted ? ' (accepted)' : ''}`;
  }

  // Reject asks first, in the page.
  confirmReject() {
    if (this.node.querySelector('.confirm')) return;
    const yes = el('button', { type: 'button', class: 'reject confirm-yes' }, `Yes, reject ${this.name}'s work`);
    const no = el('button', { type: 'button', class: 'confirm-no' }, 'Keep it');
    const box = el('div', { class: 'confirm', role: 'alertdialog' }, `Reject ${this.name}'s work? `, yes, no);
    yes.addEventListener('click', () => { box.remove(); this.act('work.reject', {}, () => `rejected ${this.name}'s work`); });
    no.addEventListener('click', () => box.remove());
    this.buttons.after(box);
    no.focus();
  }

  // Calls a method for this member; its answer (or error) is said and kept.
  act(method, params, answer, then) {
    const buttons = [...this.buttons.querySelectorAll('button')];
    for (const b of buttons) b.disabled = true;
    const asking = this.said(`${method}…`, false);
    this.view.rpc.call(method, { thread: this.view.thread, member: this.name, ...params }).then((r) => {
      asking.textContent = answer(r);
      if (r && r.state && r.member === this.name) this.update(r);
      if (then) then(r);
    }, (e) => {
      asking.textContent = `kdd said: ${e.message}`;
      asking.className = 'error';
      asking.setAttribute('role', 'alert');
    }).finally(() => this.drawButtons());
  }

  // A newer state of the worktree (a `work` event, an answer).
  update(tree) {
    const moved = tree.head !== this.tree.head;
    this.tree = tree;
    this.drawHead();
    this.drawButtons();
    if (moved) {
      if (this.revising) this.said(`${this.name} revised its work: ${short(tree.head)}`, false);
      this.revising = false;
      this.load();
    }
  }

  load() {
    this.rpc('work.diff', { highlight: true, commits: true }).then(([d]) => {
      this.diff = d;
      this.commits.replaceChildren(...(d.commits || []).map((c) =>
        el('li', {}, el('code', {}, short(c.commit)), ' ', c.subject)));
      this.drawDiff();
    }, (e) => failure(this.files, e));
    this.loadComments();
  }

  loadComments() {
    this.rpc('work.comments', {}).then((cs) => { this.comments = cs; this.drawButtons(); this.drawDiff(); },
      (e) => failure(this.files, e));
  }

  // The comments being typed, to draw again with the diff: nothing typed
  // is lost to a redraw (a revision, the layout, another comment).
  drafts() {
    return [...this.files.querySelectorAll('tr.comment-box')].map((row) => {
      const t = row.querySelector('textarea');
      return { path: row.dataset.path, line: Number(row.dataset.line), code: lineText(row.previousSibling),
        text: t.value, focused: document.activeElement === t, start: t.selectionStart, end: t.selectionEnd };
    }).filter((d) => d.text || d.focused);
  }

  // Each draft back in its box at its line — where the line's text is
  // now, if a revision moved it; one whose line is gone is kept above the
  // diff, to be copied, until dismissed.
  restore(drafts) {
    for (const d of drafts) {
      const rows = [...this.files.querySelectorAll(`tr.commentable[data-path="${CSS.escape(d.path)}"]`)]
        .filter((tr) => lineText(tr) === d.code);
      const tr = rows.sort((a, b) => Math.abs(a.dataset.line - d.line) - Math.abs(b.dataset.line - d.line))[0];
      if (tr) { this.commentBox(tr, d.path, Number(tr.dataset.line), d); continue; }
      if (!d.text) continue;
      const kept = el('textarea', { rows: 3, readOnly: true }, d.text);
      kept.setAttribute('aria-label', `Your comment on ${d.path} line ${d.line}, not sent`);
      const dismiss = el('button', { type: 'button', class: 'dismiss' }, 'Dismiss');
      const notice = el('div', { class: 'draft-kept', role: 'status', 'data-path': d.path, 'data-line': String(d.line) },
        el('p', {}, `Your comment on ${d.path}:${d.line} was not sent: that line is no longer in the diff. Its text:`),
        kept, el('div', { class: 'buttons' }, dismiss));
      dismiss.addEventListener('click', () => notice.remove());
      this.kept.append(notice);
    }
  }

  drawDiff() {
    const d = this.diff;
    if (!d) return;
    const mode = modeNow();
    const drafts = this.drafts();
    this.files.replaceChildren();
    const placed = new Set();
    for (const f of d.highlighted || []) {
      const stat = d.files.find((s) => s.path === f.path);
      const h = el('h3', { class: 'file' }, f.path, stat && !f.binary ? el('span', { class: 'meta' }, ` +${stat.added} −${stat.removed}`) : null,
        f.deleted ? el('span', { class: 'meta' }, ' (deleted)') : null);
      const table = el('table', { class: `diff ${mode}`, 'data-path': f.path });
      table.append(el('caption', { class: 'syntax' }, f.binary ? 'binary file' : f.syntax));
      const body = el('tbody');
      for (const hunk of f.hunks) {
        body.append(el('tr', { class: 'hunk' }, el('td', { colSpan: mode === 'split' ? 4 : 3 }, hunk.header)));
        const rows = mode === 'split' ? this.splitRows(f, hunk.lines) : hunk.lines.map((l) => this.unifiedRow(f, l));
        for (const { tr, line } of rows) {
          body.append(tr);
          const here = line ? this.comments.filter((c) => c.commit === d.head && c.path === f.path && c.end_line === line) : [];
          if (here.length) {
            body.append(this.commentRow(here, mode));
            for (const c of here) placed.add(c.id);
          }
        }
      }
      table.append(body);
      this.files.append(el('div', { class: 'file-diff' }, h, el('div', { class: 'scroll' }, table)));
    }
    if (d.truncated) this.files.append(el('p', { class: 'notice' }, 'The diff was cut: kd diff shows it whole.'));
    this.restore(drafts);
    const other = this.comments.filter((c) => !placed.has(c.id));
    this.elsewhere.replaceChildren();
    if (other.length) {
      this.elsewhere.append(el('h3', {}, 'Comments on earlier commits'),
        el('ul', { class: 'comments' }, ...other.map((c) => this.comment(c, true))));
    }
  }

  unifiedRow(f, l) {
    const tr = el('tr', { class: `line ${l.kind}`, 'data-kind': l.kind });
    tr.append(el('td', { class: 'num' }, l.old ? String(l.old) : ''), el('td', { class: 'num' }, l.new ? String(l.new) : ''));
    const c = code(l.tokens);
    c.prepend(el('span', { class: 'sign' }, SIGN[l.kind]));
    tr.append(c);
    this.commentable(tr, f, l.kind === 'removed' ? null : l.new);
    return { tr, line: l.kind === 'removed' ? null : l.new };
  }

  // Side by side: context on both sides; removed lines beside the added
  // lines that follow them.
  splitRows(f, lines) {
    const out = [];
    let i = 0;
    const side = (l, cls) => l
      ? [el('td', { class: 'num' }, String(cls === 'old' ? l.old : l.new)), code(l.tokens)]
      : [el('td', { class: 'num' }), el('td', { class: 'code empty' })];
    while (i < lines.length) {
      const l = lines[i];
      if (l.kind === 'context' || l.kind === 'note') {
        const tr = el('tr', { class: `line ${l.kind}`, 'data-kind': l.kind }, ...side(l.kind === 'note' ? null : l, 'old'),
          ...(l.kind === 'note' ? [el('td', { class: 'num' }), code(l.tokens)] : side(l, 'new')));
        this.commentable(tr, f, l.kind === 'note' ? null : l.new);
        out.push({ tr, line: l.kind === 'note' ? null : l.new });
        i++;
        continue;
      }
      const removed = [];
      const added = [];
      while (i < lines.length && lines[i].kind === 'removed') removed.push(lines[i++]);
      while (i < lines.length && lines[i].kind === 'added') added.push(lines[i++]);
      for (let k = 0; k < Math.max(removed.length, added.length); k++) {
        const o = removed[k];
        const n = added[k];
        const tr = el('tr', { class: `line ${n ? 'added' : 'removed'}${o && n ? ' changed' : ''}`, 'data-kind': n ? 'added' : 'removed' },
          ...side(o, 'old'), ...side(n, 'new'));
        if (o) tr.children[1].classList.add('removed');
        if (n) tr.children[3].classList.add('added');
        this.commentable(tr, f, n ? n.new : null);
        out.push({ tr, line: n ? n.new : null });
      }
    }
    return out;
  }

  // A line of the new side takes a comment: click, tap, Enter or Space.
  commentable(tr, f, line) {
    if (!line) return;
    tr.dataset.path = f.path;
    tr.dataset.line = String(line);
    tr.tabIndex = 0;
    tr.classList.add('commentable');
    tr.setAttribute('aria-label', `${f.path} line ${line}: Enter to comment`);
    tr.addEventListener('click', (e) => { if (!e.target.closest('a, button, textarea')) this.commentBox(tr, f.path, line); });
    tr.addEventListener('keydown', (e) => {
      if (e.key === 'Enter' || e.key === ' ') { e.preventDefault(); this.commentBox(tr, f.path, line); }
      else if (e.key === 'ArrowDown' || e.key === 'ArrowUp') {
        const all = [...this.files.querySelectorAll('tr.commentable')];
        const next = all[all.indexOf(tr) + (e.key === 'ArrowDown' ? 1 : -1)];
        if (next) { e.preventDefault(); next.focus(); }
      }
    });
  }

  // A box to comment on `line` under its row (its text and caret back from
  // `draft` when the diff is drawn again). Several may be open at once.
  commentBox(tr, path, line, draft = null) {
    const open = tr.nextSibling;
    if (open && open.classList.contains('comment-box')) { open.querySelector('textarea').focus(); return; }
    const text = el('textarea', { rows: 3, placeholder: `A comment on ${path}:${line} (Ctrl+Enter sends)`, required: true });
    text.setAttribute('aria-label', `Comment on ${path} line ${line}`);
    if (draft) text.value = draft.text;
    const save = el('button', { type: 'submit', class: 'comment-save' }, 'Comment');
    const cancel = el('button', { type: 'button', class: 'comment-cancel' }, 'Cancel');
    const said = el('p', { class: 'said', role: 'status' });
    const form = el('form', { class: 'comment-form' }, text, el('div', { class: 'buttons' }, save, cancel, said));
    const row = el('tr', { class: 'comment-box', 'data-path': path, 'data-line': String(line) },
      el('td', { colSpan: tr.children.length }, form));
    const close = () => { row.remove(); tr.focus(); };
    cancel.addEventListener('click', close);
    text.addEventListener('keydown', (e) => {
      if (e.key === 'Escape') close();
      else if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) form.requestSubmit();
    });
    form.addEventListener('submit', (e) => {
      e.preventDefault();
      const body = text.value.trim();
      if (!body) return;
      save.disabled = true;
      this.rpc('work.comment', { path, line, body }).then((c) => {
        this.comments.push(c);
        row.remove();
        this.drawButtons();
        this.drawDiff();
        const again = this.files.querySelector(`tr.commentable[data-path="${CSS.escape(path)}"][data-line="${line}"]`);
        if (again) again.focus();
      }, (err) => { said.textContent = `kdd said: ${err.message}`; said.className = 'said error'; save.disabled = false; });
    });
    tr.after(row);
    if (!draft || draft.focused) text.focus();
    if (draft) text.setSelectionRange(draft.start, draft.end);
  }

  commentRow(comments, mode) {
    return el('tr', { class: 'comments-row' }, el('td', { colSpan: mode === 'split' ? 4 : 3 },
      el('ul', { class: 'comments' }, ...comments.map((c) => this.comment(c, false)))));
  }

  comment(c, where) {
    const state = c.state === 'resolved' ? (c.resolved_by ? `resolved by ${short(c.resolved_by)}` : 'resolved by the King') : c.state;
    const li = el('li', { class: `comment ${c.state}`, 'data-id': c.id, 'data-state': c.state },
      el('div', { class: 'meta' }, el('strong', {}, c.author), where ? ` on ${c.path}:${c.line}` : '', ` · ${state}`),
      el('div', { class: 'body' }, c.body));
    if (c.state !== 'resolved') {
      const resolve = el('button', { type: 'button', class: 'resolve' }, 'Resolve');
      resolve.addEventListener('click', () => {
        resolve.disabled = true;
        this.view.rpc.call('work.resolve_comment', { id: c.id }).then((r) => {
          this.comments = this.comments.map((x) => (x.id === r.id ? r : x));
          this.drawButtons();
          this.drawDiff();
        }, (e) => { resolve.disabled = false; this.said(`kdd said: ${e.message}`, true); });
      });
      li.append(resolve);
    }
    return li;
  }

  // A run of this member, live.
  run(e) {
    if (e.type === 'run_started') { this.revising = true; this.activity.textContent = `${this.name} is working…`; }
    else if (e.type === 'activity') this.activity.textContent = `${this.name}: ${e.what}`;
    else if (e.type === 'run_finished') this.activity.textContent = `${this.name}'s run finished`;
    else if (e.type === 'run_error') this.activity.textContent = `${this.name}'s run failed: ${e.error}`;
    else if (e.type === 'run_cancelled') this.activity.textContent = `${this.name}'s run was cancelled`;
  }
}

// `/work/<thread>`: every member's work on the thread, live.
export function workView(rpc, main, thread) {
  styleSheet();
  const view = { rpc, thread };
  const title = el('h1', {}, 'Work');
  const task = el('p', { class: 'task' });
  const unified = el('button', { type: 'button', class: 'mode', 'data-mode': 'unified' }, 'Unified');
  const split = el('button', { type: 'button', class: 'mode', 'data-mode': 'split' }, 'Side by side');
  const modes = el('div', { class: 'modes', role: 'group' }, 'Diff: ', unified, split);
  modes.setAttribute('aria-label', 'Diff layout');
  const list = el('div', { id: 'work' });
  main.append(el('p', {}, el('a', { href: `/t/${encodeURIComponent(thread)}`, 'data-link': '' }, '← The thread')),
    title, task, modes, list);
  const members = new Map();
  const showMode = () => {
    const m = modeNow();
    for (const b of [unified, split]) b.setAttribute('aria-pressed', String(b.dataset.mode === m));
    split.disabled = NARROW.matches;
    split.title = NARROW.matches ? 'Too narrow for side by side' : '';
    for (const mem of members.values()) mem.drawDiff();
  };
  for (const b of [unified, split]) {
    b.addEventListener('click', () => {
      try { localStorage.setItem(MODE_KEY, b.dataset.mode); } catch { /* private mode: not remembered */ }
      showMode();
    });
  }
  const narrowed = () => showMode();
  NARROW.addEventListener('change', narrowed);

  const add = (tree) => {
    const m = new Member(view, tree);
    members.set(tree.member, m);
    list.append(m.node);
    m.load();
    return m;
  };
  const load = () => rpc.call('work.list', { thread }).then((trees) => {
    if (trees.length === 0) list.replaceChildren(el('p', { class: 'empty' }, 'No work on this thread: kd work "TASK" gives members some.'));
    if (trees[0]) task.textContent = trees[0].task;
    for (const t of trees) {
      const m = members.get(t.member);
      if (m) m.update(t); else add(t);
    }
    showMode();
  }, (e) => failure(main, e));
  rpc.call('thread.get', { thread }).then((t) => { title.textContent = `Work: ${t.title || t.id}`; }, () => {});
  load();

  const event = (e) => {
    if (e.type === 'work') {
      const m = members.get(e.worktree.member);
      if (m) m.update(e.worktree); else add(e.worktree);
    } else if (e.member && members.has(e.member)) {
      members.get(e.member).run(e);
    } else if (e.type === 'lagged') {
      load();
    }
  };
  let stop = () => {};
  let left = false;
  // Live only: the thread's messages are the thread view's.
  rpc.subscribe('thread.subscribe', { thread, since_seq: Number.MAX_SAFE_INTEGER }, 'thread.unsubscribe', event)
    .then((s) => { if (left) s(); else stop = s; }, (e) => failure(main, e));
  return () => { left = true; stop(); NARROW.removeEventListener('change', narrowed); };
}
